"""admin_panel/log_tail.py on real files: the tail across rotated files, following appends,
rotation by the real RotatingFileHandler, truncation, and a last line still being written."""

import json
import logging
import logging.handlers

from admin_panel.log_tail import LogLine, log_files, parse_line, rotated_paths, tail
from omlx_site.json_log import JsonFormatter


def json_line(i, level="INFO", **extra):
    return json.dumps(
        {
            "time": f"2026-11-29T20:00:{i % 60:02d}.000Z",
            "level": level,
            "logger": "omlx.test",
            "message": f"line {i}",
            "pid": 1,
            **extra,
        }
    )


def write(path, lines, end="\n"):
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + end)


def messages(lines):
    return [line.message or line.raw for line in lines]


def test_parse_json_and_raw_lines():
    line = parse_line(json_line(3, "WARNING", request_id="r1"))
    assert (line.level, line.logger, line.message, line.raw) == ("WARNING", "omlx.test", "line 3", None)
    assert line.extra == {"pid": 1, "request_id": "r1"}
    for text in ("Traceback (most recent call last):", "[1, 2]", '{"level": '):
        raw = parse_line(text)
        assert raw.raw == text and raw.message == "" and raw.extra == {}


def test_filters():
    warning = parse_line(json_line(1, "WARNING", model="Tiny-Model"))
    info = parse_line(json_line(2, "INFO"))
    raw = LogLine(raw="something odd")
    assert warning.matches("WARNING") and warning.matches("INFO") and not warning.matches("ERROR")
    assert info.matches("") and not info.matches("WARNING")
    assert raw.matches("") and not raw.matches("DEBUG") and raw.matches("", "ODD")
    assert warning.matches("", "tiny-model")  # extra fields are searched, case-insensitively
    assert not info.matches("", "tiny-model")


def test_tail_of_a_file_and_its_rotated_files(tmp_path):
    log = tmp_path / "server.log"
    write(tmp_path / "server.log.2", [json_line(i) for i in range(0, 10)])
    write(tmp_path / "server.log.1", [json_line(i) for i in range(10, 20)])
    write(log, [json_line(i) for i in range(20, 25)])
    assert rotated_paths(log) == [tmp_path / "server.log.1", tmp_path / "server.log.2"]
    lines, _ = tail(log, 8)
    assert messages(lines) == [f"line {i}" for i in range(17, 25)]
    lines, _ = tail(log, 100)
    assert messages(lines) == [f"line {i}" for i in range(25)]
    lines, _ = tail(log, 3, lambda line: line.matches("", "line 1"))
    assert messages(lines) == ["line 17", "line 18", "line 19"]


def test_tail_across_blocks_and_long_lines(tmp_path):
    log = tmp_path / "server.log"
    write(log, [json_line(i, note="x" * (i * 997 % 90_000)) for i in range(200)])  # lines up to 90 kB
    lines, follower = tail(log, 150)
    assert messages(lines) == [f"line {i}" for i in range(50, 200)]
    assert follower.position == log.stat().st_size and follower.read() == []


def test_missing_file_then_created(tmp_path):
    log = tmp_path / "server.log"
    lines, follower = tail(log, 10)
    assert lines == [] and follower.read() == []
    write(log, [json_line(1), json_line(2)])
    assert [parse_line(t).message for t in follower.read()] == ["line 1", "line 2"]


def test_partial_last_line_waits_for_its_newline(tmp_path):
    log = tmp_path / "server.log"
    write(log, [json_line(1)])
    with open(log, "a") as f:
        f.write(json_line(2)[:20])  # the writer is half-way through line 2
    lines, follower = tail(log, 10)
    assert messages(lines) == ["line 1"]
    assert follower.read() == []
    with open(log, "a") as f:
        f.write(json_line(2)[20:] + "\n" + json_line(3)[:5])
    assert [parse_line(t).message for t in follower.read()] == ["line 2"]
    with open(log, "a") as f:
        f.write(json_line(3)[5:] + "\n")
    assert [parse_line(t).message for t in follower.read()] == ["line 3"]


def test_follow_across_real_rotations(tmp_path):
    log = tmp_path / "server.log"
    handler = logging.handlers.RotatingFileHandler(log, maxBytes=2000, backupCount=3, encoding="utf-8")
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("omlx.test_log_tail")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.warning("first")
        lines, follower = tail(log, 10)
        assert messages(lines) == ["first"]
        seen = []
        for i in range(60):  # about 150 bytes a line: several rotations
            logger.warning("message %d", i)
            if i % 7 == 0:
                seen += [parse_line(t).message for t in follower.read()]
        seen += [parse_line(t).message for t in follower.read()]
        assert len(rotated_paths(log)) == 3
        assert seen == [f"message {i}" for i in range(60)]  # none lost, none twice, in order
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_truncated_file_is_read_from_its_start(tmp_path):
    log = tmp_path / "server.log"
    write(log, [json_line(i) for i in range(5)])
    _, follower = tail(log, 10)
    with open(log, "w") as f:
        f.write(json_line(7) + "\n")
    assert [parse_line(t).message for t in follower.read()] == ["line 7"]
    write(log, ["not json at all"])
    assert follower.read() == ["not json at all"]


def test_removed_file(tmp_path):
    log = tmp_path / "server.log"
    write(log, [json_line(1)])
    _, follower = tail(log, 10)
    log.unlink()
    assert follower.read() == []
    write(log, [json_line(2)])
    assert [parse_line(t).message for t in follower.read()] == ["line 2"]


def test_log_files(tmp_path):
    for name in ("worker-12.log", "server.log", "server.log.1", "notes.txt"):
        (tmp_path / name).write_text("")
    assert log_files(tmp_path) == ["server.log", "worker-12.log"]
    assert log_files(tmp_path / "missing") == [] and log_files(None) == []
