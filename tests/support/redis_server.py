"""A real redis-server for the Redis-mode tests (tests/live/test_redis_*.py, the browser's Redis
chat, the soak load): ``RedisServer(workdir)`` on a free port of 127.0.0.1, no persistence, that a
test may kill and start again on the same port; ``Process``, a subprocess whose output lines are
collected (the server's `omlx worker`s use it too: ``start_worker``)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

REDIS = shutil.which("redis-server")  # None: the Redis tests skip
SKIP_REASON = "redis-server is not installed (scripts/install_system_deps.sh installs Debian's redis-server)"
SECRET = "redis-mode-test-secret-0123456789"  # OMLX_REDIS_SECRET of the servers and their workers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A subprocess whose output lines are collected (``output``) as they come; started, it has
    printed ``ready_text`` (else RuntimeError with its output)."""

    def __init__(self, argv, env, ready_text, timeout=120):
        self.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.output = []
        threading.Thread(target=self._read, daemon=True).start()
        if not self.wait_for_output(ready_text, timeout):
            self.stop()
            raise RuntimeError(f"{argv} did not start:\n" + "".join(self.output))

    def _read(self):
        for line in self.process.stdout:
            self.output.append(line)

    def wait_for_output(self, text, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.output):
                return True
            if self.process.poll() is not None:
                time.sleep(0.2)  # let the reader take the last lines
                return any(text in line for line in self.output)
            time.sleep(0.05)
        return False

    def stop(self, sig=signal.SIGTERM):
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_worker(redis_url, models, env) -> Process:
    """An `omlx worker` of the folders in ``models`` on ``redis_url`` with environment ``env``,
    once it says it takes requests."""
    argv = [sys.executable, "-m", "omlx_site.cli", "worker", "--redis-url", redis_url]
    return Process(argv + ["--model-dir", str(models)], env, "taking requests from")


class RedisServer:
    """A redis-server on a fixed free port (``url``: redis://127.0.0.1:PORT/0) that writes nothing
    but to ``workdir``; ``kill()`` and ``start()`` again keep the port, ``stop()`` ends it."""

    def __init__(self, workdir):
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None
        self.start()

    def start(self):
        argv = [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.workdir)]
        self.process = Process(argv, dict(os.environ), "Ready to accept connections")

    def running(self):
        return self.process.process.poll() is None

    def kill(self):
        self.process.stop(signal.SIGKILL)

    def stop(self):
        self.process.stop()
