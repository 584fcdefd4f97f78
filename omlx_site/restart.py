"""Restarting `omlx serve` from the console (the Settings page's Restart button).

The server stops as on SIGTERM (omlx_site/shutdown.py: running requests may finish, the engines
write their hot KV blocks down), then the same process re-executes the command line it was started
with (``sys.orig_argv``), in the environment it was started with (before `omlx serve` exported its
flags into it), so it reads settings.json anew. Re-executing keeps the process id, the terminal and
the standard streams, so one mechanism works everywhere: in a terminal, and under `omlx service`
(systemd and launchd see the same process go on; no exit for them to judge, whatever their restart
policy). Flags on the command line (or in the service's unit) are given again and still win over
settings.json, which is why the console does not let a flag's setting be changed.

Only a process started by `omlx serve` can restart itself (``available``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from omlx_site import config

logger = logging.getLogger("omlx.server")

_requested = threading.Event()


def available() -> bool:
    return config.launch_environ() is not None


def request() -> None:
    """Begin the graceful stop; `omlx serve` re-executes itself once it has stopped."""
    if not available():
        raise RuntimeError("this process was not started by `omlx serve`: it cannot restart itself")
    logger.warning("restart requested from the console", extra={"event": "restart"})
    _requested.set()
    os.kill(os.getpid(), signal.SIGTERM)


def requested() -> bool:
    return _requested.is_set()


def reexec() -> None:
    """Replace this process by a new `omlx serve` with the same command line (never returns)."""
    argv = [sys.executable, *sys.orig_argv[1:]]
    environ = config.launch_environ() or dict(os.environ)
    print("omlx restarting: " + " ".join(argv[1:3]) + " ...", flush=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, environ)
