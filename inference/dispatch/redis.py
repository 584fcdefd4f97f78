"""OMLX_REDIS_URL: Huey's queue and the channel layer live in Redis; `omlx worker` or `manage.py
run_huey` processes (and OMLX_HUEY_WORKERS threads of the server) take the jobs. Each worker
announces itself (``inference.dispatch.worker_presence``) and listens for aborts, which are broadcast to
every worker over the channel layer (the worker running a request may be any of them)."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from .base import NoWorker
from .huey import HueyBackend, generate


class RedisBackend(HueyBackend):
    name = "redis"
    networked = True

    def available(self) -> None:
        from inference.dispatch.worker_presence import any_worker_alive

        alive = any_worker_alive()
        if alive is None:
            raise NoWorker("The queue (Redis) cannot be reached", code="queue_unavailable")
        if not alive:
            raise NoWorker("No worker is running: start one with `omlx worker`")

    async def submit(self, job) -> None:
        from . import huey_consumer

        await sync_to_async(generate, thread_sensitive=False)(job.to_dict())  # network I/O
        huey_consumer.notify()

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
        from . import relay, worker_presence

        relay.listen_control(_on_control)
        worker_presence.start_heartbeat()

    def worker_stopped(self) -> None:
        from . import worker_presence

        worker_presence.stop_heartbeat()

    def close(self) -> None:
        from . import worker_presence

        worker_presence.stop_heartbeat()
        super().close()


def _on_control(event: dict) -> None:
    """A broadcast control event (``inference.dispatch.relay.broadcast_control``)."""
    if event.get("kind") == "abort":
        from inference.generation import abort_job

        abort_job(event["request_id"], event["model"], int(event["count"]))
