"""`omlx serve` refusing to start: bad flags, a port already in use."""

import os
import socket
import subprocess
import sys


def run_serve(tmp_path, *args):
    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home"))
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_flags(tmp_path):
    out = run_serve(tmp_path, "--max-concurrent-requests", "0")
    assert out.returncode == 2
    assert "--max-concurrent-requests" in out.stderr
    out = run_serve(tmp_path, "--port", "70000")
    assert out.returncode == 2
    assert "--port" in out.stderr
    for flag, value in [
        ("--hot-cache-max-size", "lots"),
        ("--paged-ssd-cache-max-size", "-5GB"),
        ("--paged-ssd-cache-ttl", "0"),
        ("--workers", "-1"),
        ("--workers", "0"),
        ("--max-request-size", "10"),
        ("--max-request-size", "huge"),
        ("--max-queued-requests", "-1"),
        ("--redis-url", "http://localhost"),
        ("--max-model-memory", "lots"),
        ("--max-model-memory", "auto"),
        ("--max-process-memory", "0"),
        ("--allowed-hosts", "box.lan:8000"),
        ("--cors-origins", "localhost:3000"),
    ]:
        out = run_serve(tmp_path, flag, value)
        assert out.returncode == 2, (flag, out.stderr)
        assert flag in out.stderr


def test_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_serve(tmp_path, "--port", str(port), "--model-dir", str(tmp_path / "none"))
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr


def test_worker_needs_redis(tmp_path):
    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home"))
    env.pop("OMLX_REDIS_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "--redis-url" in out.stderr


def test_version_is_the_package_metadata(tmp_path):
    from importlib.metadata import version

    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home"))
    out = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, f"omlx {version('omlx')}\n", "")
    assert not (tmp_path / "home").exists()  # nothing set up, nothing written
