"""`omlx serve` on SIGTERM: running streams finish (or end with an error event after the grace
period), the process exits 0, the KV blocks on disk are all valid, and the JSON log says so."""

import json
import os
import shutil
import signal

import httpx
import pytest

from cache import block_file, cold_kids
from tests.support.server import ServerProcess

LONG = {"model": "tiny", "prompt": "Go on forever", "max_tokens": 100000, "ignore_eos": True, "stream": True}


@pytest.fixture
def models(tmp_path, model_dir):
    folder = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), folder / "tiny")
    return folder


def _stream_and_terminate(server, body):
    """Stream ``body``; SIGTERM the server after the fifth event; the SSE data lines."""
    events = []
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 5:
                    server.process.send_signal(signal.SIGTERM)
    return events


def _log_lines(home):
    return [json.loads(line) for line in (home / "logs" / "server.log").read_text().splitlines()]


def _check_cold_tier(home, models):
    """Every file in the cold tier is a valid block (besides model.json); a new server reconciles
    with 0 bad files."""
    blocks = []
    for fingerprint in (home / "cache").iterdir():
        for path in fingerprint.rglob("*"):
            if path.is_file() and cold_kids.DIR in path.relative_to(fingerprint).parts:
                # a child marker (cache/cold_kids.py): empty, named by keys, never half a block
                assert path.stat().st_size == 0, f"a marker with content: {path}"
                assert cold_kids.KEY_HEX.match(path.name) and cold_kids.KEY_HEX.match(path.parent.name), path
                continue
            if path.is_file() and path.name != block_file.MODEL_INFO:  # the model's name, for `omlx cache`
                match = block_file.BLOCK_NAME.match(path.name)
                assert match, f"not a block file: {path}"
                blocks.append(block_file.read_header(path, fingerprint.name, match.group(1)))
    assert blocks, "the stream's prompt left no block on disk"
    again = ServerProcess(["--model-dir", str(models)], home)
    try:
        reply = httpx.post(
            again.url + "/v1/completions",
            json={"model": "tiny", "prompt": "Go on forever", "max_tokens": 2},
            timeout=120,
        )
        assert reply.status_code == 200
        assert reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert again.wait_for_output("removed 0 bad files")
    finally:
        assert again.stop() == 0
    assert not any(
        "removed bad block file" in line or "removing bad block file" in line for line in again.output
    )


def test_sigterm_lets_a_running_stream_finish(tmp_path, models, monkeypatch):
    monkeypatch.setenv("OMLX_SHUTDOWN_GRACE_SECONDS", "600")
    home = tmp_path / "home"
    server = ServerProcess(["--model-dir", str(models)], home)
    try:
        events = _stream_and_terminate(server, dict(LONG, max_tokens=400))
    finally:
        code = server.stop()
    assert code == 0
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    assert sum(len(json.loads(e)["choices"][0]["text"]) > 0 for e in events[:-1]) > 5
    waiting = [
        line for line in _log_lines(home) if line["message"].startswith("SIGTERM: not taking new requests")
    ]
    assert waiting and waiting[0]["message"].endswith("for 1 running")  # the stream was still running
    assert waiting[0]["event"] == "shutdown" and waiting[0]["level"] == "INFO"
    assert not any(line["message"].startswith("aborting") for line in _log_lines(home))
    assert "omlx stopped\n" in server.output
    _check_cold_tier(home, models)


def test_sigterm_aborts_a_stream_after_the_grace_period(tmp_path, models, monkeypatch):
    monkeypatch.setenv("OMLX_SHUTDOWN_GRACE_SECONDS", "1")
    home = tmp_path / "home"
    server = ServerProcess(["--model-dir", str(models)], home)
    try:
        events = _stream_and_terminate(server, LONG)  # returns: the connection closed
    finally:
        code = server.stop()
    assert code == 0
    error = json.loads(events[-1])["error"]
    assert error["code"] == "server_shutting_down"
    assert "shutting down" in error["message"]
    assert all("choices" in json.loads(e) for e in events[:-1])
    messages = [line["message"] for line in _log_lines(home)]
    assert "aborting 1 requests still running after 1 s" in messages
    _check_cold_tier(home, models)


def test_the_log_file_is_json_lines_and_rotates(tmp_path, models, monkeypatch):
    monkeypatch.setenv("OMLX_LOG_MAX_BYTES", "600")
    monkeypatch.setenv("OMLX_LOG_BACKUPS", "2")
    home = tmp_path / "home"
    server = ServerProcess(["--model-dir", str(models)], home)
    try:
        for i in range(8):
            reply = httpx.post(
                server.url + "/v1/completions",
                json={"model": "tiny", "prompt": f"number {i}", "max_tokens": 2},
                timeout=120,
            )
            assert reply.status_code == 200
        missing = httpx.post(
            server.url + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=60
        )
        assert missing.status_code == 404
    finally:
        assert server.stop() == 0
    logs = sorted(p.name for p in (home / "logs").iterdir())
    assert logs == ["server.log", "server.log.1", "server.log.2"]  # older ones were dropped
    entries = []
    for name in logs:
        assert os.path.getsize(home / "logs" / name) <= 600 + 1000  # one line may pass the limit
        for line in (home / "logs" / name).read_text().splitlines():
            entry = json.loads(line)
            assert {"time", "level", "logger", "message", "pid"} <= set(entry)
            assert entry["time"].endswith("Z")
            entries.append(entry)
    finished = [e for e in entries if e["message"].endswith("finished: length")]
    assert finished, "the newest requests are in the kept files"
    assert all(
        e["model"] == "tiny" and e["completion_tokens"] == 2 and e["request_id"].startswith("cmpl-")
        for e in finished
    )
    assert entries[-1]["message"] == "omlx stopped" or any(e["message"] == "unloaded tiny" for e in entries)
