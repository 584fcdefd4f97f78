"""Loads and unloads started from the Models page, each on its own thread.

Loading a model takes seconds to minutes, and an unload writes the hot KV blocks down to the SSD
tier first, so the page starts them here and returns at once: the row says "loading…" and the
table polls until the job ends. Invariant: at most one job per model id runs at a time; a job's
error (would not fit, busy, load failed) is kept until the next job of that model or until it is
shown (``take_error``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional

logger = logging.getLogger("omlx.admin")


@dataclass
class Job:
    action: str  # "load" or "unload"
    thread: threading.Thread
    error: Optional[str] = None
    status: int = 200  # the HTTP status the API would answer for the error (409, 507, ...)


class ModelJobs:
    def __init__(self):
        self._lock = threading.Lock()
        self._jobs: Dict[str, Job] = {}

    def start(
        self,
        model_id: str,
        action: str,
        work: Callable[[], None],
        errors: Callable[[BaseException], Optional[tuple]],
        wait: float = 0.3,
    ) -> Optional[Job]:
        """Run ``work`` on a thread unless a job of ``model_id`` is running (then None).
        ``errors(exc)`` turns an exception into (status, message), or None for an unexpected
        one. Waits up to ``wait`` seconds, so a quick refusal is answered at once."""
        with self._lock:
            running = self._jobs.get(model_id)
            if running is not None and running.thread.is_alive():
                return None
            job = Job(
                action,
                threading.Thread(
                    target=lambda: self._run(job, work, errors), daemon=True, name=f"omlx-admin-{action}"
                ),
            )
            self._jobs[model_id] = job
        job.thread.start()
        job.thread.join(wait)
        return job

    def running(self, model_id: str) -> Optional[str]:
        """The action of the running job of ``model_id``, if any."""
        with self._lock:
            job = self._jobs.get(model_id)
        return job.action if job is not None and job.thread.is_alive() else None

    def any_running(self) -> bool:
        with self._lock:
            return any(j.thread.is_alive() for j in self._jobs.values())

    def has_error(self, model_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(model_id)
            return job is not None and not job.thread.is_alive() and job.error is not None

    def take_error(self, model_id: str) -> Optional[Job]:
        """The finished job of ``model_id`` if it failed (once: it is forgotten)."""
        with self._lock:
            job = self._jobs.get(model_id)
            if job is None or job.thread.is_alive() or job.error is None:
                return None
            del self._jobs[model_id]
            return job

    @staticmethod
    def _run(job: Job, work, errors) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - shown on the page, never lost
            known = errors(exc)
            if known is None:
                logger.exception("model %s from the console failed", job.action)
                known = (500, f"{type(exc).__name__}: {exc}")
            job.status, job.error = known


jobs = ModelJobs()
