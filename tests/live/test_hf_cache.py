"""Models in the Hugging Face cache are discovered and served: the cache is made by running
huggingface_hub's snapshot_download against the stand-in hub (tests/support/hub_server.py), and served by a
real `omlx serve --hf-cache DIR`."""

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from inference.pool.discovery import discover
from tests.support.server import ServerProcess
from tests.support.hub_server import HubServer

REPO, COMMIT = "test-org/tiny-chat", "c" * 40
PARTIAL, PARTIAL_COMMIT = "test-org/half-done", "d" * 40
DOWNLOAD = (
    "import sys; from huggingface_hub import snapshot_download; "
    "snapshot_download(sys.argv[1], cache_dir=sys.argv[2], endpoint=sys.argv[3], token=False)"
)


def snapshot_download(repo, cache, hub, **popen):
    """huggingface_hub's snapshot_download in a process of its own (so that it can be killed)."""
    env = dict(os.environ, HF_HOME=str(cache.parent / "hf-home"), HF_HUB_DISABLE_PROGRESS_BARS="1")
    return subprocess.Popen(
        [sys.executable, "-c", DOWNLOAD, repo, str(cache), hub.url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )


@pytest.fixture
def cache(tmp_path, model_dir):
    """An HF cache with REPO downloaded whole and PARTIAL killed while its weights were coming."""
    hub = HubServer()
    hub.add_repo(REPO, model_dir("qwen2", "tiny"), commit=COMMIT)
    hub.add_repo(PARTIAL, model_dir("qwen2", "tiny"), commit=PARTIAL_COMMIT)
    cache = tmp_path / "hf-cache"
    try:
        whole = snapshot_download(REPO, cache, hub)
        assert whole.wait(300) == 0, whole.communicate()
        hub.stall_after["model.safetensors"] = 1000
        half = snapshot_download(PARTIAL, cache, hub)
        snapshot = cache / "models--test-org--half-done" / "snapshots" / PARTIAL_COMMIT
        others = [n for n in hub.repos[PARTIAL].files if n != "model.safetensors"]
        deadline = time.monotonic() + 120
        while not all((snapshot / n).is_file() for n in others):
            assert half.poll() is None, half.communicate()
            assert time.monotonic() < deadline, "the download never reached the weights"
            time.sleep(0.05)
        half.send_signal(signal.SIGKILL)
        half.wait()
    finally:
        hub.close()
    return cache


def test_discovery_finds_the_main_snapshot_and_refuses_a_partial_one(cache, tmp_path, model_dir):
    folders = discover([tmp_path / "no-models"], hf_cache_dir=cache)
    whole = folders[REPO]
    assert whole.servable, whole.reason
    assert whole.path == cache / "models--test-org--tiny-chat" / "snapshots" / COMMIT
    assert whole.size_bytes == sum(p.stat().st_size for p in model_dir("qwen2", "tiny").iterdir())
    partial = folders[PARTIAL]
    assert not partial.servable
    assert partial.reason.startswith("incomplete download: model.safetensors missing")
    # A model folder of the same id wins; the cache's is listed as shadowed.
    models = tmp_path / "models"
    (models / "test-org").mkdir(parents=True)
    os.symlink(model_dir("qwen2", "tiny"), models / REPO)
    folders = discover([models], hf_cache_dir=cache)
    assert folders[REPO].path == models / REPO
    assert folders[f"{REPO}@{whole.path}"].reason.startswith("shadowed by")


def test_served_from_the_cache_and_listed_with_where_it_lives(cache, tmp_path):
    server = ServerProcess(
        ["--model-dir", str(tmp_path / "no-models"), "--hf-cache", str(cache)], tmp_path / "home"
    )
    try:
        ids = [m["id"] for m in httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]]
        assert ids == [REPO]
        rows = {r["id"]: r for r in httpx.get(f"{server.url}/v1/models/status", timeout=60).json()["data"]}
        assert rows[REPO]["path"].endswith(f"models--test-org--tiny-chat/snapshots/{COMMIT}")
        assert not rows[PARTIAL]["servable"] and "incomplete download" in rows[PARTIAL]["reason"]
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            timeout=300,
            json={"model": REPO, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] >= 1
    finally:
        assert server.stop() == 0

    # `omlx models` (no server at --url) lists the cache from $OMLX_HF_CACHE, with the paths.
    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home2"), OMLX_HF_CACHE=str(cache))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "omlx_site.cli",
            "models",
            "--json",
            "--url",
            "http://127.0.0.1:9",
            "--model-dir",
            str(tmp_path / "no-models"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["hf_cache"] == str(cache)
    rows = {r["id"]: r for r in report["models"]}
    assert rows[REPO]["servable"] and rows[REPO]["path"].endswith(f"snapshots/{COMMIT}")
    assert not rows[PARTIAL]["servable"]
