"""`omlx models` and `omlx cache` as the real command line (subprocesses), with and without a
live `omlx serve`."""

import json
import os
import shutil
import socket
import subprocess
import sys

import httpx
import pytest

from tests.support.server import ServerProcess


def omlx(home, *args, stdin=None):
    env = dict(os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
    for name in ("OMLX_MODEL_DIR", "OMLX_API_KEY", "OMLX_COLD_CACHE_DIR"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
    )


def report_of(out):
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def folder_bytes(path):
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.fixture
def models(tmp_path, model_dir):
    root = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), root / "alpha")
    shutil.copytree(model_dir("llama", "tiny"), root / "beta")
    return root


def test_models_without_a_server(tmp_path, models):
    home = tmp_path / "home"
    out = omlx(home, "models", "--model-dir", str(models), "--url", closed_port_url(), "--json")
    assert out.returncode == 0, out.stderr
    report = report_of(out)
    assert report["source"] == "disk" and "no server answers" in report["note"]
    rows = {r["id"]: r for r in report["models"]}
    assert set(rows) == {"alpha", "beta"}
    assert rows["alpha"]["size_bytes"] == folder_bytes(models / "alpha")
    assert rows["alpha"]["type"] == "llm" and rows["alpha"]["loaded"] is None

    table = omlx(home, "models", "--model-dir", str(models), "--url", closed_port_url())
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "loaded state unknown" in table.stdout
    assert lines[2].split() == ["NAME", "ORIGIN", "TYPE", "SIZE", "STATE", "NOTE"]
    assert lines[3].split()[:4] == ["alpha", "model", "dir", "llm"]

    empty = omlx(home, "models", "--model-dir", str(tmp_path / "none"), "--url", closed_port_url())
    assert empty.returncode == 0 and "no model folders found" in empty.stdout


def test_models_and_cache_with_a_live_server(tmp_path, models):
    home, cold = tmp_path / "home", tmp_path / "ssd"
    key = "k-123"
    server = ServerProcess(
        ["--model-dir", str(models), "--paged-ssd-cache-dir", str(cold), "--api-key", key], home
    )
    listing = ["--model-dir", str(models), "--url", server.url]
    common = listing + ["--paged-ssd-cache-dir", str(cold)]
    try:
        for model in ("alpha", "beta"):
            reply = httpx.post(
                f"{server.url}/v1/chat/completions",
                timeout=300,
                headers={"Authorization": f"Bearer {key}"},
                json={
                    "model": model,
                    "max_tokens": 3,
                    "messages": [{"role": "user", "content": "tell me a story " * 20}],
                },
            )
            assert reply.status_code == 200, reply.text

        # A wrong key: the server is there but says nothing; the listing falls back to disk.
        out = omlx(home, "models", *listing, "--api-key", "wrong", "--json")
        report = report_of(out)
        assert report["source"] == "disk" and "refused the API key" in report["note"]

        out = omlx(home, "models", *listing, "--api-key", key, "--json")
        assert out.returncode == 0, out.stderr
        report = report_of(out)
        assert report["server"] == server.url
        rows = {r["id"]: r for r in report["models"]}
        assert set(rows) == {"alpha", "beta"}
        if report["source"] == "server":  # the model pool's /v1/models/status
            assert rows["alpha"]["loaded"] is True
        else:  # GET /v1/models only
            assert rows["alpha"]["served"] is True

        out = omlx(home, "cache", *common, "--api-key", key, "--json")
        assert out.returncode == 0, out.stderr
        report = report_of(out)
        assert report["server"] == server.url
        by_model = {r["model"]: r for r in report["models"]}
        assert set(by_model) == {"alpha", "beta"}
        alpha = by_model["alpha"]
        assert alpha["loaded_as"] == "alpha"
        assert alpha["hot"]["blocks"] >= 1 and alpha["hot"]["bytes"] > 0
        assert alpha["model_path"] == str((models / "alpha").resolve())

        assert httpx.get(f"{server.url}/v1/cache/status", timeout=60).status_code == 401  # no key

        # Clearing while the server runs is refused.
        out = omlx(home, "cache", "clear", *common, "--api-key", key, "--yes")
        assert out.returncode == 1 and "a server is running" in out.stderr
    finally:
        assert server.stop() == 0

    # Server gone: the SSD tier from disk and rows, named from model.json.
    out = omlx(home, "cache", *common, "--json")
    report = report_of(out)
    assert report["server"] is None and "no server answers" in report["note"]
    by_model = {r["model"]: r for r in report["models"]}
    for name in ("alpha", "beta"):
        c = by_model[name]["cold"]
        assert c["files"] >= 1 and c["files"] == c["rows"] and c["bytes"] == c["row_bytes"] > 0
        assert by_model[name]["hot"] is None
    table = omlx(home, "cache", *common)
    assert table.returncode == 0 and "alpha" in table.stdout and "SSD BLOCKS" in table.stdout

    # Without --yes and without a terminal to ask on, nothing is removed.
    out = omlx(home, "cache", "clear", *common, "--model", "alpha")
    assert out.returncode == 1 and "pass --yes" in out.stderr
    out = omlx(home, "cache", "clear", *common, "--model", "gamma", "--yes")
    assert out.returncode == 1 and "no SSD-tier blocks of 'gamma'" in out.stderr

    out = omlx(home, "cache", "clear", *common, "--model", "alpha", "--yes")
    assert out.returncode == 0, out.stderr
    assert f"and {by_model['alpha']['cold']['rows']} rows of 1 model(s)" in out.stdout
    alpha_dir = cold / by_model["alpha"]["fingerprint"]
    assert not alpha_dir.exists()
    report = report_of(omlx(home, "cache", *common, "--json"))
    assert [r["model"] for r in report["models"]] == ["beta"]  # no rows or files of alpha left

    # Everything: files and rows of beta too.
    out = omlx(home, "cache", "clear", *common, "--yes")
    assert out.returncode == 0, out.stderr
    assert report_of(omlx(home, "cache", *common, "--json"))["models"] == []
    assert [p for p in cold.iterdir()] == []


def test_pulled_cache_restart_after_clear_serves_again(tmp_path, models):
    """After a clear, a server starts on the emptied cache and serves (reconciliation finds
    nothing stale), and writes the model's blocks and model.json anew."""
    home, cold = tmp_path / "home", tmp_path / "ssd"
    server = ServerProcess(["--model-dir", str(models), "--paged-ssd-cache-dir", str(cold)], home)
    try:
        body = {"model": "alpha", "max_tokens": 2, "messages": [{"role": "user", "content": "hello " * 30}]}
        assert httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300).status_code == 200
    finally:
        server.stop()
    common = ["--model-dir", str(models), "--paged-ssd-cache-dir", str(cold), "--url", closed_port_url()]
    assert omlx(home, "cache", "clear", *common, "--yes").returncode == 0
    server = ServerProcess(["--model-dir", str(models), "--paged-ssd-cache-dir", str(cold)], home)
    try:
        assert httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300).status_code == 200
    finally:
        server.stop()
    report = report_of(omlx(home, "cache", *common, "--json"))
    assert [r["model"] for r in report["models"]] == ["alpha"]
    assert report["models"][0]["cold"]["files"] == report["models"][0]["cold"]["rows"] >= 1
