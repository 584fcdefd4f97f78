"""`omlx pull` against a local HTTP server standing in for the Hugging Face hub (tests/support/hub_server.py),
run as the real command line in a subprocess (huggingface_hub does the HTTP)."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.server import ServerProcess
from tests.support.hub_server import HubServer

REPO = "test-org/tiny-chat"
COMMIT = "a" * 40
# huggingface_hub writes a download in chunks of this size (constants.DOWNLOAD_CHUNK_SIZE): what
# an interruption keeps on disk is a whole number of them.
CHUNK = 10 * 1024 * 1024
BIG = "weights-extra.safetensors"  # an LFS file of a few chunks, last in the pull's order
BIG_SIZE = 2 * CHUNK + 12345


def omlx(tmp_path, *args, env=None, **kwargs):
    # HF_HOME in the test's folder: no token or cache of the machine's user is used.
    full_env = dict(
        os.environ, OMLX_HOME=str(tmp_path / "home"), HF_HOME=str(tmp_path / "hf-home"), **(env or {})
    )
    for name in ("HF_ENDPOINT", "HF_TOKEN", "OMLX_MODEL_DIR", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
        if name not in (env or {}):
            full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


@pytest.fixture
def hub(model_dir):
    server = HubServer()
    server.add_repo(REPO, model_dir("qwen2", "tiny"), commit=COMMIT)
    yield server
    server.close()


@pytest.fixture
def big(hub):
    """The repo with a file of a few download chunks added."""
    hub.repos[REPO].files[BIG] = random.Random(0).randbytes(BIG_SIZE)
    return hub.repos[REPO]


def assert_pulled(got: Path, repo):
    """``got`` holds exactly the repo's files, byte for byte."""
    on_disk = sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file())
    assert [p for p in on_disk if p != ".omlx-pull.json"] == sorted(repo.files)
    for name, data in repo.files.items():
        assert (got / name).read_bytes() == data, name


def assert_same_folder(got: Path, want: Path, extra=()):
    names = sorted(p.name for p in want.iterdir())
    assert sorted(p.name for p in got.iterdir() if p.name not in (".omlx-pull.json", *extra)) == names
    for name in names:
        assert (got / name).read_bytes() == (want / name).read_bytes(), name


def test_pull_downloads_the_folder_byte_for_byte(tmp_path, hub, model_dir):
    hub.repos[REPO].files["notes/empty.txt"] = b""  # a nested path, and an empty file
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert_same_folder(models / REPO, model_dir("qwen2", "tiny"), extra=("notes",))
    assert (models / REPO / "notes" / "empty.txt").read_bytes() == b""
    assert f"{REPO} is in {models / REPO}" in out.stdout
    # Plain progress lines (stderr is not a terminal): one per file started and finished.
    assert "pulling test-org/tiny-chat at " + COMMIT in out.stderr
    assert "model.safetensors: done [" in out.stderr
    assert "\r" not in out.stderr
    # The files were fetched at the listed commit; the LFS file through the redirect.
    resolves = [s.path for s in hub.log if "/resolve/" in s.path]
    assert resolves and all(f"/resolve/{COMMIT}/" in p for p in resolves)
    assert [s.status for s in hub.sent_for("/cdn/test-org/tiny-chat/model.safetensors")] == [200]
    assert not (models / ".omlx-pull").exists()  # staging cleaned up
    # A second pull finds it there and leaves it alone.
    again = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert again.returncode == 0 and "already exists" in again.stderr


def test_hf_endpoint_from_environment_and_default_model_dir(tmp_path, hub, model_dir):
    out = omlx(tmp_path, "pull", REPO, env={"HF_ENDPOINT": hub.url})
    assert out.returncode == 0, out.stderr
    assert_same_folder(tmp_path / "home" / "models" / REPO, model_dir("qwen2", "tiny"))
    # --hf-endpoint wins over HF_ENDPOINT (which here points nowhere).
    hub.add_repo("test-org/other", model_dir("qwen2", "tiny"))
    out = omlx(
        tmp_path,
        "pull",
        "test-org/other",
        "--hf-endpoint",
        hub.url,
        env={"HF_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert out.returncode == 0, out.stderr


def test_dropped_connection_resumes_with_range(tmp_path, hub, big):
    hub.drop_after[BIG] = CHUNK + 5000
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert_pulled(models / REPO, big)
    sent = hub.sent_for(f"/cdn/test-org/tiny-chat/{BIG}")
    assert [(s.status, s.range) for s in sent] == [(200, None), (206, f"bytes={CHUNK}-")]
    # Only the part of a chunk that was in flight came twice.
    assert sum(s.body_bytes for s in sent) == BIG_SIZE + 5000


def test_a_connection_that_keeps_dropping_fails_clearly_and_resumes_later(tmp_path, hub, big):
    hub.drop_after[BIG] = CHUNK + 5000  # a chunk arrives, then every attempt dies at once
    hub.drop_always.add(BIG)
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 1
    assert (
        f"downloading {BIG} failed after huggingface_hub's retries; run the same command again "
        "to resume" in out.stderr
    )
    assert "Traceback" not in out.stderr
    partial = models / ".omlx-pull" / REPO / (BIG + ".incomplete")
    assert partial.stat().st_size == CHUNK  # what arrived is kept
    assert not (models / REPO).exists()
    hub.drop_always.clear()
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert_pulled(models / REPO, big)
    last = hub.sent_for(f"/cdn/test-org/tiny-chat/{BIG}")[-1]
    assert (last.range, last.body_bytes) == (f"bytes={CHUNK}-", BIG_SIZE - CHUNK)


def test_a_server_that_ignores_range_makes_the_file_start_over(tmp_path, hub, big):
    hub.drop_after[BIG] = CHUNK + 5000
    hub.ignore_range.add(BIG)
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert_pulled(models / REPO, big)
    sent = hub.sent_for(f"/cdn/test-org/tiny-chat/{BIG}")
    assert [(s.status, s.range) for s in sent] == [(200, None), (200, f"bytes={CHUNK}-")]


def test_progress_bar_on_a_terminal():
    import io

    from inference.hub import HubFile, Snapshot
    from omlx_site.commands.progress import PullProgress

    stream = io.StringIO()
    progress = PullProgress(stream, tty=True)
    files = [HubFile("config.json", 100), HubFile("model.safetensors", 4000)]
    progress.start(Snapshot(REPO, COMMIT, files), 0)
    for f in files:
        progress.file_start(f, 0)
        progress.advance(f.size)
        progress.file_done(f)
    progress.finish(Path("/models") / REPO)
    text = stream.getvalue()
    assert "\r\x1b[K" in text  # redrawn in place
    assert "model.safetensors [" + "#" * 24 + "] 100%" in text
    assert "total 100% 4.1 KB/4.1 KB" in text
    assert text.endswith("2 files, 4.1 KB: complete\n")


def test_killed_pull_resumes_on_the_next_run(tmp_path, hub, big):
    hub.stall_after[BIG] = CHUNK + 5000
    models = tmp_path / "models"
    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home"), HF_HOME=str(tmp_path / "hf-home"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omlx_site.cli",
            "pull",
            REPO,
            "--model-dir",
            str(models),
            "--hf-endpoint",
            hub.url,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    partial = models / ".omlx-pull" / REPO / (BIG + ".incomplete")
    deadline = time.monotonic() + 120
    while not (partial.exists() and partial.stat().st_size == CHUNK):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the pull never reached the stall"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    hub.release.set()
    # Killed half way: nothing is discoverable at the destination.
    assert not (models / REPO).exists()
    assert (models / ".omlx-pull" / REPO / "config.json").is_file()  # finished files are kept
    before = len(hub.log)

    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert "already here" in out.stderr
    assert_pulled(models / REPO, big)
    rerun = hub.log[before:]
    weights = [s for s in rerun if s.path.endswith(BIG) and s.path.startswith("/cdn/")]
    assert [(s.status, s.range, s.body_bytes) for s in weights] == [
        (206, f"bytes={CHUNK}-", BIG_SIZE - CHUNK)
    ]
    # Files finished before the kill were not fetched again.
    assert not [s for s in rerun if s.path.endswith(("/config.json", "/model.safetensors"))]


def test_errors_are_clear(tmp_path, hub, model_dir):
    models = str(tmp_path / "models")
    out = omlx(tmp_path, "pull", "test-org/missing", "--model-dir", models, "--hf-endpoint", hub.url)
    assert out.returncode == 1
    assert "repository test-org/missing not found" in out.stderr
    assert "Traceback" not in out.stderr

    hub.add_repo("test-org/gated", model_dir("qwen2", "tiny"), token="hf_secret")
    out = omlx(tmp_path, "pull", "test-org/gated", "--model-dir", models, "--hf-endpoint", hub.url)
    assert out.returncode == 1
    assert "is gated" in out.stderr and "HF_TOKEN" in out.stderr
    out = omlx(
        tmp_path,
        "pull",
        "test-org/gated",
        "--model-dir",
        models,
        "--hf-endpoint",
        hub.url,
        "--token",
        "hf_wrong",
    )
    assert out.returncode == 1 and "this token has no access" in out.stderr
    before = len(hub.log)
    out = omlx(
        tmp_path,
        "pull",
        "test-org/gated",
        "--model-dir",
        models,
        "--hf-endpoint",
        hub.url,
        env={"HF_TOKEN": "hf_secret"},
    )
    assert out.returncode == 0, out.stderr
    # The token goes to the hub, never to the CDN it redirects to.
    sent = hub.log[before:]
    assert all(s.authorization == "Bearer hf_secret" for s in sent if "/gated/resolve/" in s.path)
    assert [s.authorization for s in sent if s.path.startswith("/cdn/")] == [None]

    out = omlx(tmp_path, "pull", REPO, "--revision", "v9", "--model-dir", models, "--hf-endpoint", hub.url)
    assert out.returncode == 1 and "revision 'v9' does not exist" in out.stderr

    out = omlx(tmp_path, "pull", REPO, "--model-dir", models, "--hf-endpoint", "http://127.0.0.1:9")
    assert out.returncode == 1 and "cannot reach the hub at http://127.0.0.1:9" in out.stderr

    out = omlx(
        tmp_path, "pull", REPO, "--model-dir", models, "--hf-endpoint", hub.url, env={"HF_HUB_OFFLINE": "1"}
    )
    assert out.returncode == 1 and "HF_HUB_OFFLINE is set" in out.stderr

    out = omlx(tmp_path, "pull", "not-a-repo-id", "--model-dir", models, "--hf-endpoint", hub.url)
    assert out.returncode == 2 and "ORG/NAME" in out.stderr
    assert not (tmp_path / "models" / REPO).exists()


def test_corrupt_file_is_refused(tmp_path, hub, model_dir):
    data = (model_dir("qwen2", "tiny") / "model.safetensors").read_bytes()
    hub.corrupt["model.safetensors"] = data[:-4] + b"oops"  # same size, other bytes
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 1
    assert "model.safetensors arrived corrupt (sha256" in out.stderr
    assert not (models / REPO).exists()
    assert not list((models / ".omlx-pull").rglob("*.incomplete"))  # removed, to start anew
    del hub.corrupt["model.safetensors"]
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert_same_folder(models / REPO, model_dir("qwen2", "tiny"))


def test_pulled_model_is_served(tmp_path, hub):
    models = tmp_path / "models"
    out = omlx(tmp_path, "pull", REPO, "--model-dir", str(models), "--hf-endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    import httpx

    serve_dir, model_id = models, REPO  # the model pool's discovery finds ORG/NAME at depth 2
    server = ServerProcess(["--model-dir", str(serve_dir)], tmp_path / "serve-home")
    try:
        ids = [m["id"] for m in httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]]
        assert ids == [model_id]
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            timeout=300,
            json={"model": model_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] >= 1
    finally:
        server.stop()
