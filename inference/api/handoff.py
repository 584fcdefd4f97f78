"""How a job reaches a worker: a Huey task (the design), or straight to the engine ("direct",
settings.OMLX_API_HANDOFF). Both run ``inference.generation.run_job``; only the hop differs.

Before a job is queued, ``limits.admit`` refuses it when its model has too many choices in flight
(429), when no worker can take it or the memory guard reports pressure (503); its slot is given back when the view's subscription to
the request closes. With Redis, an abort is broadcast to every worker process (``relay``), since
any of them may hold the request.
"""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings

from inference import relay
from inference.generation import GenerationJob, abort_job, run_job

from . import limits


def _direct() -> bool:
    return settings.OMLX_API_HANDOFF == "direct"


async def submit(job: GenerationJob) -> None:
    # Redis is network I/O: a thread. The embedded queue is a local SQLite file written without an
    # fsync per commit (inference.huey_consumer.QueueHuey): a few tens of microseconds, less than
    # the hop to a thread and back, so it is written from the loop.
    networked = bool(settings.OMLX_REDIS_URL)
    if networked:
        await sync_to_async(limits.check_workers, thread_sensitive=False)()
    else:
        limits.check_workers()  # no I/O without Redis
    limits.check_memory()
    limits.admit(job)
    relay.when_unsubscribed(job.request_id, lambda: limits.release(job))
    if _direct():
        await sync_to_async(run_job, thread_sensitive=False)(job)
    else:
        from inference import huey_consumer, tasks

        if networked:
            await sync_to_async(tasks.generate, thread_sensitive=False)(job.to_dict())
        else:
            tasks.generate(job.to_dict())
        huey_consumer.notify()


def abort(job: GenerationJob) -> None:
    """Abort every choice of ``job`` (synchronous: called while the view is being cancelled)."""
    count = len(job.choice_ids())
    if _direct():
        abort_job(job.request_id, job.model, count)
    elif settings.OMLX_REDIS_URL:
        relay.broadcast_control({"kind": "abort", "request_id": job.request_id, "model": job.model,
                                 "count": count})
    else:
        from inference import huey_consumer, tasks

        tasks.abort(job.request_id, job.model, count)
        huey_consumer.notify()
