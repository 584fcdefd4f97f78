"""How a job reaches a worker: through the process's dispatch backend (``inference.dispatch``:
direct, Huey in SQLite, Huey in Redis, chosen from settings). Every backend runs
``inference.generation.run_job``; only the hop differs.

Before a job is queued, ``limits.admit`` refuses it when its model has too many choices in flight
(429), when no worker can take it or the memory guard reports pressure (503); its slot is given
back when the view's subscription to the request closes.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async

from inference.dispatch import relay
from inference.dispatch import NoWorker, get_backend
from inference.generation import GenerationJob

from . import limits
from .errors import ApiError


async def submit(job: GenerationJob) -> None:
    backend = get_backend()
    if backend.networked:  # Redis is network I/O: a thread
        await sync_to_async(limits.check_workers, thread_sensitive=False)()
    else:
        limits.check_workers()  # no I/O without Redis
    limits.check_memory()
    limits.admit(job)
    relay.when_unsubscribed(job.request_id, lambda: limits.release(job))
    try:
        await backend.submit(job)
    except NoWorker as exc:  # Redis went away since check_workers
        raise ApiError(503, str(exc), code=exc.code) from None


def abort(job: GenerationJob) -> None:
    """Abort every choice of ``job`` (synchronous: called while the view is being cancelled)."""
    get_backend().abort(job)
