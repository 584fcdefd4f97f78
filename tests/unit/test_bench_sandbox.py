"""The sandbox that runs the programs a model wrote (inference/bench/sandbox.py): a program that
misbehaves fails cleanly, within its time, and leaves nothing behind."""

import os
import socket
import threading
import time

import pytest

from inference.bench import humaneval, sandbox

TIMEOUT = 3.0


def test_a_correct_program_passes_and_a_wrong_one_fails():
    assert sandbox.run_program("assert sum([1, 2]) == 3\n", TIMEOUT).passed
    failed = sandbox.run_program("assert 1 + 1 == 3\n", TIMEOUT)
    assert not failed.passed and failed.reason == "failed" and "AssertionError" in failed.detail


def test_a_program_cannot_write_outside_its_directory(tmp_path):
    target = tmp_path / "written-by-the-model"
    outcome = sandbox.run_program(f"open({str(target)!r}, 'w').write('x')\n", TIMEOUT)
    assert not outcome.passed and outcome.reason == "failed"
    assert "PermissionError" in outcome.detail or "Read-only" in outcome.detail
    assert not target.exists()
    # its own directory is writable, up to the file size limit
    assert sandbox.run_program("open('here.txt', 'w').write('x')\n", TIMEOUT).passed
    big = sandbox.run_program(f"open('big', 'wb').write(b'x' * {2 * sandbox.FILE_BYTES})\n", TIMEOUT)
    assert not big.passed


def test_a_program_cannot_allocate_10_gb():
    outcome = sandbox.run_program("x = bytearray(10 * (1 << 30))\nx[-1] = 1\n", TIMEOUT)
    assert not outcome.passed and "MemoryError" in outcome.detail


@pytest.mark.skipif(not sandbox.isolation(), reason="no network namespace on this system")
def test_a_program_cannot_reach_a_socket():
    # a server of this process on the loopback: the program would reach it without the namespace
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []

    def accept():
        server.settimeout(TIMEOUT + 2)
        try:
            accepted.append(server.accept()[0])
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\n"
    outcome = sandbox.run_program(code, TIMEOUT)
    server.close()
    thread.join()
    assert not outcome.passed and outcome.reason == "failed" and not accepted, outcome


def _sandboxed_processes():
    """Processes running a sandboxed program (their command line ends with ``-I -S -``)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().endswith(b"\0-I\0-S\0-\0"):
                    found.append(pid)
        except OSError:
            pass
    return found


def test_a_fork_bomb_and_a_sleeper_end_within_the_timeout():
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    outcome = sandbox.run_program(bomb, TIMEOUT)
    assert not outcome.passed and outcome.reason in ("timed out", "killed", "failed")
    assert not _sandboxed_processes()  # every process it forked is gone
    sleeper = sandbox.run_program("import time\ntime.sleep(1000)\n", TIMEOUT)
    assert not sleeper.passed and sleeper.reason == "timed out"


def test_a_humaneval_program_is_prompt_completion_and_check():
    problem = humaneval.problems(1)[0]
    solution = (
        "    for i, a in enumerate(numbers):\n"
        "        for b in numbers[i + 1:]:\n"
        "            if abs(a - b) < threshold:\n"
        "                return True\n"
        "    return False\n"
    )
    assert sandbox.run_program(humaneval.program(problem, solution + "\ndef extra():\n    boom"), 10).passed
    assert not sandbox.run_program(humaneval.program(problem, "    return True\n"), 10).passed


def test_a_program_dies_with_the_process_that_started_it(tmp_path):
    # a parent killed mid-run (no timeout reached, no cleanup ran) leaves no fork bomb behind
    import subprocess
    import sys

    script = (
        "from inference.bench import sandbox\n"
        "sandbox.run_program('import os\\nwhile True:\\n    try:\\n        os.fork()\\n"
        "    except OSError:\\n        pass\\n', 600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
    deadline = time.monotonic() + 60
    while not _sandboxed_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandboxed_processes(), "the program never started"
    parent.kill()
    parent.wait()
    while _sandboxed_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sandboxed_processes()
