"""Shared fixtures: test model folders built once per session."""
import os

import inference  # noqa: F401  (loads the fast CPU BLAS before anything imports mlx)

import pytest

# The machine's Hugging Face cache stays out of the tests (and of the servers they start): a test
# that wants one passes --hf-cache DIR.
os.environ["OMLX_HF_CACHE"] = "off"

from inference.testkit.registry import build_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """model_dir(arch="qwen2", preset="tiny", **overrides) -> Path of a built model folder."""
    built = {}

    def get(arch="qwen2", preset="tiny", **overrides):
        key = (arch, preset, tuple(sorted(overrides.items())))
        if key not in built:
            path = tmp_path_factory.mktemp(f"model-{arch}-{preset}")
            built[key] = build_model(path, arch=arch, preset=preset, **overrides)
        return built[key]

    return get


class ServerProcess:
    """A running `omlx serve` subprocess: ``url`` (http://127.0.0.1:PORT), ``output`` (its
    stdout and stderr lines so far), ``stop(sig)`` -> exit code. ``preexec_fn`` runs in the
    child before exec (tests/memory_limit.py puts it under a memory limit there)."""

    def __init__(self, args, home, preexec_fn=None):
        import os
        import subprocess
        import sys
        import threading

        env = dict(os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"),
                   OMLX_LOG_LEVEL="INFO", PYTHONUNBUFFERED="1")
        env.pop("OMLX_MODEL_DIR", None)
        env.pop("OMLX_API_KEY", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "omlx_site.cli", "serve", "--port", "0", *args], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec_fn,
        )
        self.output = []
        self._serving = threading.Event()
        self.url = None
        threading.Thread(target=self._read, daemon=True).start()
        if not self._serving.wait(120) or self.url is None:  # no URL: the process ended first
            code = self.stop()
            raise RuntimeError(f"omlx serve did not start (exit code {code}):\n" + "".join(self.output))

    def _read(self):
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("omlx serving "):
                self.url = line.split()[-1]
                self._serving.set()
        self._serving.set()

    def wait_for_output(self, text, timeout=60.0):
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.output):
                return True
            time.sleep(0.05)
        return False

    def stop(self, sig=None):
        import signal
        import subprocess

        if self.process.poll() is None:
            self.process.send_signal(sig or signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:  # stuck: its threads' stacks go to the output
                import time

                self.process.send_signal(signal.SIGUSR1)
                time.sleep(2)
                self.process.kill()
                self.process.wait()
                print("omlx serve did not stop; its output:\n" + "".join(self.output))
        return self.process.returncode


@pytest.fixture(scope="session")
def omlx_server(tmp_path_factory, model_dir):
    """One live `omlx serve` for the session, serving the tiny qwen2 test model as "tiny"."""
    import shutil

    models = tmp_path_factory.mktemp("served-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    server = ServerProcess(["--model-dir", str(models)], tmp_path_factory.mktemp("omlx-home"))
    yield server
    server.stop()
