"""The Huey consumer inside the server process (the embedded default): worker threads, no
signal handlers (the server owns signals, and Python only lets the main thread set them).

SQLite queues are polled; an idle worker sleeps up to ``max_delay`` seconds between polls. In
this process a new task also wakes the workers at once (``notify``), so the hand-off costs no
polling delay; tasks queued by other processes are still seen within ``max_delay``.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

from huey import SqliteHuey
from huey.consumer import Consumer, Worker
from huey.storage import SqliteStorage

logger = logging.getLogger("omlx.huey")

_wakeup = threading.Event()
_running: Optional["EmbeddedConsumer"] = None


def running() -> bool:
    """Whether this process runs a consumer (``start_embedded_consumer``, not stopped since)."""
    return _running is not None


def notify() -> None:
    """Wake idle workers of this process's embedded consumer (a task was just queued)."""
    _wakeup.set()


class _QueueStorage(SqliteStorage):
    """Huey's SQLite storage in WAL mode with ``synchronous=NORMAL``: a commit no longer waits for
    an fsync (about 0.5 ms each, three commits per API request: enqueue, dequeue, revoke check);
    the file stays consistent after a crash, and what a power cut may lose (the last commits) are
    jobs whose clients are gone with the server anyway."""

    def _create_connection(self):
        conn = super()._create_connection()
        if self._fsync is None:
            conn.execute("pragma synchronous=NORMAL")
        return conn


class QueueHuey(SqliteHuey):
    """The embedded queue's Huey (settings.HUEY "huey_class")."""

    storage_class = _QueueStorage


class _WakeableWorker(Worker):
    def sleep(self):
        if self.delay > self.max_delay:
            self.delay = self.max_delay
        if _wakeup.wait(self.delay):
            _wakeup.clear()
            self.delay = self.default_delay
        else:
            self.delay *= self.backoff


class EmbeddedConsumer(Consumer):
    """Huey's Consumer with thread workers, started and stopped by the server."""

    worker_class = _WakeableWorker

    def __init__(self, huey, workers: int = 2, max_delay: float = 0.5):
        super().__init__(
            huey,
            workers=workers,
            worker_type="thread",
            initial_delay=min(0.01, max_delay),
            backoff=1.5,
            max_delay=max_delay,
            periodic=True,
            check_worker_health=False,
        )

    def _set_signal_handlers(self) -> None:
        pass

    def stop(self, graceful: bool = True, timeout: Optional[float] = 10.0) -> None:
        global _running
        if _running is self:
            _running = None
        self.shutdown_timeout = timeout
        super().stop(graceful=graceful)
        notify()


def start_embedded_consumer() -> EmbeddedConsumer:
    """Start a consumer for the project's Huey (tasks modules of every app imported first)."""
    from django.conf import settings
    from django.utils.module_loading import autodiscover_modules
    from huey.contrib.djhuey import HUEY

    autodiscover_modules("tasks")
    consumer = EmbeddedConsumer(HUEY, settings.OMLX_HUEY_WORKERS, settings.OMLX_HUEY_MAX_POLL_DELAY)
    consumer.start()
    global _running
    _running = consumer
    return consumer
