"""`omlx pull --progress json` (what the console's Downloads page reads) against the stand-in hub:
every stdout line is one JSON event, from start to finish, with byte counts that add up."""
import json

from tests.test_cli_pull import COMMIT, REPO, hub, omlx  # noqa: F401  (hub: a fixture)


def test_json_progress_events(tmp_path, hub):  # noqa: F811
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url,
               "--progress", "json")
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
