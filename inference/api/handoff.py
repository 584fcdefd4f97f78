"""How a job reaches a worker: a Huey task (the design), or straight to the engine ("direct",
settings.OMLX_API_HANDOFF). Both run ``inference.generation.run_job``; only the hop differs."""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings

from inference.generation import GenerationJob, abort_job, run_job


def _direct() -> bool:
    return settings.OMLX_API_HANDOFF == "direct"


async def submit(job: GenerationJob) -> None:
    if _direct():
        await sync_to_async(run_job, thread_sensitive=False)(job)
    else:
        from inference import huey_consumer, tasks

        await sync_to_async(tasks.generate, thread_sensitive=False)(job.to_dict())
        huey_consumer.notify()


def abort(job: GenerationJob) -> None:
    """Abort every choice of ``job`` (synchronous: called while the view is being cancelled)."""
    count = len(job.choice_ids())
    if _direct():
        abort_job(job.request_id, job.model, count)
    else:
        from inference import huey_consumer, tasks

        tasks.abort(job.request_id, job.model, count)
        huey_consumer.notify()
