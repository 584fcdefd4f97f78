"""Graceful stop of `omlx serve` on SIGTERM (and SIGINT).

The first signal starts the drain: new requests get a 503 at once (``lifecycle.start_shutdown``),
requests already running may finish for up to ``OMLX_SHUTDOWN_GRACE_SECONDS``; those still running
then are aborted, so each stream ends with a well-formed error event (code
``server_shutting_down``) instead of a cut connection. When no HTTP request is left (or a few more
seconds have passed), the reactor stops; ``serve`` then closes the engines, which writes the hot
KV blocks and the cold tier's queue to disk. A second signal during the drain stops at once.

Everything here runs on the reactor's thread (the signal handler only schedules work there).
"""

from __future__ import annotations

import logging
import signal
import time

from inference import lifecycle
from inference.api.common import handoff, limits

logger = logging.getLogger("omlx.server")

POLL_SECONDS = 0.05
# After the aborts: how long the views get to send their last event before the reactor stops.
ABORT_WAIT_SECONDS = 5.0


class GracefulShutdown:
    def __init__(self, reactor, server, grace_seconds: float):
        self.reactor = reactor
        self.server = server  # daphne.server.Server: its connections show the requests in progress
        self.grace_seconds = grace_seconds
        self.started = None  # time.monotonic() of the first signal
        self.aborted = False

    def install(self) -> None:
        """Take SIGTERM and SIGINT over from Twisted (call once the reactor runs)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.started is None:
            self.reactor.callFromThread(self._begin, name)
        else:
            self.reactor.callFromThread(self._stop, f"{name} again: stopping now")

    def _begin(self, name: str) -> None:
        self.started = time.monotonic()
        lifecycle.start_shutdown()
        logger.info(
            "%s: not taking new requests; waiting up to %g s for %d running",
            name,
            self.grace_seconds,
            self._busy(),
            extra={"event": "shutdown"},
        )
        self._poll()

    def _poll(self) -> None:
        if not self.reactor.running:
            return
        busy = self._busy()
        elapsed = time.monotonic() - self.started
        if busy == 0:
            self._stop("no request left")
        elif not self.aborted and elapsed >= self.grace_seconds:
            self._abort_all()
            self.reactor.callLater(POLL_SECONDS, self._poll)
        elif self.aborted and elapsed >= self.grace_seconds + ABORT_WAIT_SECONDS:
            self._stop(f"{busy} requests did not end after the abort")
        else:
            self.reactor.callLater(POLL_SECONDS, self._poll)

    def _abort_all(self) -> None:
        self.aborted = True
        jobs = limits.jobs_in_flight()
        logger.warning(
            "aborting %d requests still running after %g s",
            len(jobs),
            self.grace_seconds,
            extra={"event": "shutdown"},
        )
        for job in jobs:
            try:
                handoff.abort(job)
            except Exception:
                logger.exception("aborting %s failed", job.request_id)

    def _busy(self) -> int:
        """Generations in flight plus HTTP requests in progress (websockets do not hold the stop)."""
        pending = 0
        for protocol, details in list(self.server.connections.items()):
            instance = details.get("application_instance")
            if instance is not None and not instance.done() and "WebSocket" not in type(protocol).__name__:
                pending += 1
        return max(len(limits.jobs_in_flight()), pending)

    def _stop(self, why: str) -> None:
        if self.reactor.running:
            logger.info("stopping: %s", why, extra={"event": "shutdown"})
            self.reactor.stop()
