"""OMLX_REDIS_URL: the jobs, Huey's queue (periodic tasks) and the channel layer live in Redis;
`omlx worker` or `manage.py run_huey` processes (and OMLX_HUEY_WORKERS threads of the server) take
the jobs. Each worker announces itself (``inference.dispatch.worker_presence``), publishes a summary
of what its cache holds and its load (``worker_summary``), takes the jobs routed to it
(``routed_queue``, ``route_worker``) and listens for aborts, which are broadcast to every worker over
the channel layer. The server picks the worker of each job (``router``, OMLX_ROUTE_POLICY)."""

from __future__ import annotations

import logging
import threading

from asgiref.sync import sync_to_async

from .base import NoWorker
from .huey import HueyBackend
from .errors import QUEUE_UNAVAILABLE, queue_unavailable

logger = logging.getLogger("omlx.workers")


class RedisBackend(HueyBackend):
    name = "redis"
    networked = True

    def available(self) -> None:
        from inference.dispatch.worker_presence import any_worker_alive

        alive = any_worker_alive()
        if alive is None:
            raise NoWorker(QUEUE_UNAVAILABLE, code="queue_unavailable")
        if not alive:
            raise NoWorker("No worker is running: start one with `omlx worker`")

    def __init__(self):
        super().__init__()
        from django.conf import settings

        from .router import Router, WorkerView

        self.router = Router(settings.OMLX_ROUTE_POLICY, settings.OMLX_ROUTE_DECODE_WEIGHT)
        self.view = WorkerView()
        self._url = settings.OMLX_REDIS_URL
        self._secret = settings.OMLX_REDIS_SECRET
        self._local = threading.local()

    def _client(self):
        import redis

        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = redis.Redis.from_url(self._url, socket_timeout=5)
        return client

    def workers(self) -> dict:
        """The live workers and their summaries (id -> WorkerSummary or None); may block."""
        return self.view.read(self._client(), self._secret)

    async def submit(self, job) -> None:
        await sync_to_async(self._submit_or_503, thread_sensitive=False)(job)  # network I/O

    def _submit_or_503(self, job) -> None:
        import redis

        try:
            self._submit(job)
        except (redis.RedisError, OSError) as exc:
            raise queue_unavailable(exc) from None

    def _submit(self, job) -> None:
        from inference.metrics.definitions import ROUTE_DECISIONS, ROUTE_TOKENS

        from . import relay, route_keys, routed_queue

        job_dict = job.to_dict()
        route = route_keys.route(job_dict)
        workers = self.workers()
        decision = None
        if workers:
            decision = self.router.assign(route, workers)
        try:
            routed_queue.push(self._client(), self._secret, decision and decision.worker, job_dict)
        except BaseException:
            if decision is not None:
                self.router.ended(decision)  # never queued: its work is not waiting there
            raise
        if decision is not None:
            logger.debug(
                "routed %s to %s (%s): it holds %d of ~%d prompt tokens; queued work %s",
                job.request_id,
                decision.worker,
                decision.reason,
                decision.held,
                route.prompt_tokens,
                decision.queued,
            )
            ROUTE_DECISIONS.labels(decision.worker, decision.reason).inc()
            ROUTE_TOKENS.labels(decision.worker, "prompt").inc(route.prompt_tokens)
            ROUTE_TOKENS.labels(decision.worker, "held").inc(decision.held)
            self._show_queued(decision.worker)

            def ended():
                self.router.ended(decision)
                self._show_queued(decision.worker)

            relay.when_unsubscribed(job.request_id, ended)

    def _show_queued(self, worker: str) -> None:
        from inference.metrics.definitions import ROUTE_QUEUED_WORK

        ROUTE_QUEUED_WORK.labels(worker).set(self.router.queued().get(worker, 0))

    def abort(self, job) -> None:
        from . import relay

        relay.broadcast_control(
            {
                "kind": "abort",
                "request_id": job.request_id,
                "model": job.model,
                "count": len(job.choice_ids()),
            }
        )

    def worker_started(self) -> None:
        from . import relay, route_worker, worker_presence

        relay.listen_control(_on_control)
        worker_presence.start_heartbeat()
        route_worker.start()

    def worker_stopped(self) -> None:
        from . import route_worker, worker_presence

        route_worker.stop()
        worker_presence.stop_heartbeat()

    def close(self) -> None:
        from . import route_worker, worker_presence

        route_worker.stop()
        worker_presence.stop_heartbeat()
        super().close()


def _on_control(event: dict) -> None:
    """A broadcast control event (``inference.dispatch.relay.broadcast_control``)."""
    if event.get("kind") == "abort":
        from inference.generation import abort_job

        abort_job(event["request_id"], event["model"], int(event["count"]))
