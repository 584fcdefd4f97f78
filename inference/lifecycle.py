"""The server's lifecycle: starting (it listens, its pinned models still load: GET /health answers
503 "starting"), serving, shutting down (every new request gets a 503; omlx_site/shutdown.py
drains those running). One state per process, set by `omlx serve` (omlx_site/server.py)."""

from __future__ import annotations

import threading

_starting = threading.Event()  # set while `omlx serve` loads its pinned models
_shutting_down = threading.Event()


def begin_start() -> None:
    """The server listens but is not ready yet (GET /health answers 503 "starting")."""
    _starting.set()


def end_start() -> None:
    _starting.clear()


def starting() -> bool:
    return _starting.is_set()


def start_shutdown() -> None:
    """From now on requests get a 503 (the server is stopping)."""
    _shutting_down.set()


def shutting_down() -> bool:
    return _shutting_down.is_set()
