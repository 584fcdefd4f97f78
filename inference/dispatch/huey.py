"""The embedded default: a Huey task in a SQLite queue, taken by the consumer that runs inside the
server process (``inference.dispatch.huey_consumer``, OMLX_HUEY_WORKERS threads). Its two tasks are
defined here; ``inference.tasks`` imports them, so every consumer finds them."""

from __future__ import annotations

from django.conf import settings
from huey.contrib.djhuey import task

from inference.generation import GenerationJob, abort_job, run_job

from .base import DispatchBackend, NoWorker

# A job still queued after this long has lost its client (the view gave up waiting): skip it.
JOB_EXPIRES_SECONDS = 300


@task(expires=JOB_EXPIRES_SECONDS)
def generate(job: dict) -> None:
    run_job(GenerationJob(**job))


@task(priority=10, expires=JOB_EXPIRES_SECONDS)
def abort(request_id: str, model: str, count: int) -> None:
    abort_job(request_id, model, count)


class HueyBackend(DispatchBackend):
    name = "huey"

    def __init__(self):
        self.runs_models = settings.OMLX_HUEY_WORKERS > 0

    def available(self) -> None:
        from inference.dispatch.huey_consumer import running

        if not running():
            raise NoWorker("No worker is running in this server")

    async def submit(self, job) -> None:
        # The embedded queue is a local SQLite file written without an fsync per commit
        # (inference.dispatch.huey_consumer.QueueHuey): a few tens of microseconds, less than the hop to a
        # thread and back, so it is written from the loop.
        from . import huey_consumer

        generate(job.to_dict())
        huey_consumer.notify()

    def abort(self, job) -> None:
        from . import huey_consumer

        abort(job.request_id, job.model, len(job.choice_ids()))
        huey_consumer.notify()

    def start_consumer(self):
        if settings.OMLX_HUEY_WORKERS <= 0:
            return None
        from inference.dispatch.huey_consumer import start_embedded_consumer

        return start_embedded_consumer()
