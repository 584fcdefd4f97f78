"""The worker side of routing, in Redis mode: threads that take this worker's routed jobs
(inference/dispatch/routed_queue.py) and run them, and one that publishes its ``WorkerSummary``
(inference/dispatch/worker_summary.py) and moves the jobs of dead workers to the shared list.

The summary's keys are the route keys (inference/dispatch/route_keys.py) of the jobs this worker
ran, newest last, at most ``worker_summary.MAX_KEYS``: the prompts whose blocks its cache took
last, so those it most likely still holds (in RAM, or on SSD once evicted). It is published at
every third of a heartbeat, and soon after each job it takes, so that a server that did not send
that job (another server on the same Redis) learns it within a fraction of a second.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Optional

logger = logging.getLogger("omlx.workers")

TAKERS = 2  # threads taking jobs: run_job only renders and submits, the engine runs the job
PUBLISH_AFTER_JOB_SECONDS = 0.05  # jobs taken within this are published together


class RouteWorker:
    """This process's takers and summary publisher (one per process, ``start``)."""

    def __init__(self, url: str, secret: str, heartbeat: float):
        from .worker_presence import worker_id

        self.url = url
        self.secret = secret
        self.heartbeat = heartbeat
        self.worker = worker_id()
        self._held: "OrderedDict[str, None]" = OrderedDict()
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self.jobs_taken = 0
        self._tier: Optional[str] = None  # the SSD tier's id, read at the first summary

    def _client(self):
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=max(5.0, self.heartbeat))

    def start(self) -> None:
        for n in range(TAKERS):
            threading.Thread(target=self._take_loop, name=f"omlx-route-take-{n}", daemon=True).start()
        threading.Thread(target=self._publish_loop, name="omlx-route-summary", daemon=True).start()

    def stop(self) -> None:
        """Stop taking jobs and withdraw the summary (a clean exit)."""
        from .worker_summary import KEY_PREFIX

        self._stopped.set()
        self._dirty.set()
        try:
            self._client().delete(KEY_PREFIX + self.worker)
        except Exception:
            pass

    # -- taking jobs --

    def _take_loop(self) -> None:
        from inference.generation import GenerationJob, run_job

        from . import route_keys, routed_queue

        client = self._client()
        while not self._stopped.is_set():
            try:
                job = routed_queue.take(client, self.secret, self.worker, timeout=1.0)
            except Exception as exc:  # Redis away for a moment
                logger.warning("taking routed jobs failed: %s", exc)
                self._stopped.wait(1.0)
                continue
            if job is None or self._stopped.is_set():
                continue
            try:
                job = GenerationJob(**job)
            except TypeError as exc:  # signed, so a server of another version
                logger.warning("dropped a routed job this worker cannot read: %s", exc)
                continue
            self.hold(route_keys.route_keys(job))
            run_job(job)

    def hold(self, keys) -> None:
        from .worker_summary import MAX_KEYS

        with self._lock:
            self.jobs_taken += 1
            for key in keys:
                self._held[key] = None
                self._held.move_to_end(key)
            while len(self._held) > MAX_KEYS:
                self._held.popitem(last=False)
        self._dirty.set()

    # -- the summary --

    def summary(self):
        from inference.metrics.collector import totals
        from inference.pool import get_pool

        from .worker_summary import WorkerSummary

        figures = totals(get_pool())  # this process runs models, whatever its Huey settings say
        if self._tier is None:
            from django.conf import settings

            from .cold_tier_id import tier_id

            self._tier = tier_id(settings.OMLX_COLD_CACHE_DIR)
        with self._lock:
            keys = list(self._held)
            taken = self.jobs_taken
        return WorkerSummary(
            worker=self.worker,
            keys=keys,
            models=sorted(figures.models)[:256],
            running=figures.running,
            waiting=figures.waiting,
            lookup_tokens=figures.lookup_tokens,
            hot_hit_tokens=figures.hot_hit_tokens,
            cold_hit_tokens=figures.cold_hit_tokens,
            jobs_taken=taken,
            memory_bytes=figures.process_memory,
            model_memory_bytes=figures.model_memory_used,
            cold_tier=self._tier,
            decode_row_tokens=decode_row_tokens(get_pool()),
        )

    def _publish_loop(self) -> None:
        from . import routed_queue, worker_summary
        from .worker_presence import KEY_PREFIX as ALIVE

        client = self._client()
        ttl = max(1, int(round(self.heartbeat)))
        while not self._stopped.is_set():
            try:
                data = worker_summary.encode(self.summary(), self.secret)
                client.set(worker_summary.KEY_PREFIX + self.worker, data, ex=ttl)
                routed_queue.rescue_orphans(client, self.worker, lambda worker: ALIVE + worker)
            except Exception as exc:
                logger.warning("publishing the worker summary failed: %s", exc)
            if self._dirty.wait(self.heartbeat / 3):
                self._stopped.wait(PUBLISH_AFTER_JOB_SECONDS)
                self._dirty.clear()


def decode_row_tokens(pool) -> float:
    """What a row of a decode step costs in prompt tokens, as this process's engines measured it
    (their mean; EngineStats.decode_row_tokens); 0.0 before any has."""
    from .worker_summary import MAX_ROW_TOKENS

    measured = []
    for info in pool.loaded_models().values():
        try:
            row = info["engine"].stats().decode_row_tokens
        except Exception:  # an engine closing meanwhile
            continue
        if row:
            measured.append(min(row, MAX_ROW_TOKENS))
    return sum(measured) / len(measured) if measured else 0.0


_instance: Optional[RouteWorker] = None
_lock = threading.Lock()


def start() -> None:
    """Take routed jobs in this process from now on (idempotent; Redis mode only)."""
    global _instance
    from django.conf import settings

    if not settings.OMLX_REDIS_URL:
        return
    with _lock:
        if _instance is not None:
            return
        _instance = RouteWorker(
            settings.OMLX_REDIS_URL, settings.OMLX_REDIS_SECRET, settings.OMLX_WORKER_HEARTBEAT_SECONDS
        )
        _instance.start()


def stop() -> None:
    with _lock:
        if _instance is not None:
            _instance.stop()
