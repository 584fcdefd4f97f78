"""The live server the tests drive: an `omlx serve` subprocess on a free port."""


class ServerProcess:
    """A running `omlx serve` subprocess: ``url`` (http://127.0.0.1:PORT), ``output`` (its
    stdout and stderr lines so far), ``stop(sig)`` -> exit code. ``preexec_fn`` runs in the
    child before exec (tests/support/memory_limit.py puts it under a memory limit there); ``env``
    adds to (or, with None values, removes from) the environment it inherits."""

    def __init__(self, args, home, preexec_fn=None, env=None):
        import os
        import subprocess
        import sys
        import threading

        extra = env or {}
        env = dict(
            os.environ,
            OMLX_HOME=str(home),
            OMLX_DATABASE=str(home / "omlx.sqlite3"),
            OMLX_LOG_LEVEL="INFO",
            PYTHONUNBUFFERED="1",
        )
        env.pop("OMLX_MODEL_DIR", None)
        env.pop("OMLX_API_KEY", None)
        for name, value in extra.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        self.process = subprocess.Popen(
            [sys.executable, "-m", "omlx_site.cli", "serve", "--port", "0", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=preexec_fn,
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
