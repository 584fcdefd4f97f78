"""`omlx pull --progress json` (what the console's Downloads page reads) against the stand-in hub:
every stdout line is one JSON event, from start to finish, with byte counts that add up."""

import io
import json
import time
import types

from inference.hub import HubFile
from omlx_site.commands import pull_events
from omlx_site.commands.pull_events import JsonProgress
from tests.live.test_cli_pull import CHUNK, COMMIT, REPO, hub, omlx  # noqa: F401  (hub: a fixture)


def test_json_progress_events(tmp_path, hub):  # noqa: F811
    models = tmp_path / "models"
    out = omlx(
        tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url, "--progress", "json"
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]  # every line is JSON
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "finish"
    start = events[0]
    files = hub.repos[REPO].files
    assert start["repo"] == REPO and start["commit"] == COMMIT and start["done"] == 0
    assert start["files"] == len(files) and start["total"] == sum(map(len, files.values()))
    assert sorted(e["path"] for e in events if e["event"] == "file") == sorted(files)
    assert kinds.count("file_done") == len(files)
    assert events[-1]["path"] == str(models / REPO) and events[-1]["done"] == start["total"]
    assert "pulling" not in out.stderr  # the text progress is not mixed in


def _events(stream) -> list:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_bytes_followed_by_a_stall_are_reported(monkeypatch):
    """huggingface_hub reports a download 10 MiB at a time. A chunk that arrives right after another
    event is held back by the rate limit; when the hub then stalls, no later report carries it, so
    it must go out on its own (the Downloads page showed the bytes before the chunk until the hub
    gave up, and the Cancel came too late)."""
    monkeypatch.setattr(pull_events, "PROGRESS_EVERY", 1.0)
    # The module's clock stands still, so the chunk comes within PROGRESS_EVERY of the last event
    # however slow the machine (the timer that sends it on its own is real: 1 s).
    monkeypatch.setattr(pull_events, "time", types.SimpleNamespace(monotonic=lambda: 0.0))
    out = io.StringIO()
    progress = JsonProgress(out)
    progress.file_start(HubFile("w.safetensors", 3 * CHUNK), 0)
    progress.advance(CHUNK)
    assert [e["event"] for e in _events(out)] == ["file"]  # held back, for now
    deadline = time.monotonic() + 60  # a hang guard, not a speed check
    while len(_events(out)) < 2:
        assert time.monotonic() < deadline, "the held-back progress was never sent"
        time.sleep(0.05)
    assert _events(out)[1] == {"event": "progress", "done": CHUNK}
    progress.close()
    assert len(_events(out)) == 2  # nothing new to tell


def test_close_sends_what_is_held_back(monkeypatch):
    """An interrupted pull (Cancel) tells the bytes it has before it exits."""
    monkeypatch.setattr(pull_events, "PROGRESS_EVERY", 60.0)
    out = io.StringIO()
    progress = JsonProgress(out)
    progress.file_start(HubFile("w.safetensors", 3 * CHUNK), 0)
    progress.advance(CHUNK)
    progress.close()
    assert _events(out)[-1] == {"event": "progress", "done": CHUNK}
