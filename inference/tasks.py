"""Huey tasks of the inference app: API requests handed to the engines.

In the embedded default the consumer runs inside the server process (``inference.huey_consumer``);
``manage.py run_huey`` runs it elsewhere when Huey and the channel layer are shared (Redis).
"""
from __future__ import annotations

from huey.contrib.djhuey import task

from inference.generation import GenerationJob, abort_job, run_job

# A job still queued after this long has lost its client (the view gave up waiting): skip it.
JOB_EXPIRES_SECONDS = 300


@task(expires=JOB_EXPIRES_SECONDS)
def generate(job: dict) -> None:
    run_job(GenerationJob(**job))


@task(priority=10, expires=JOB_EXPIRES_SECONDS)
def abort(request_id: str, model: str, count: int) -> None:
    abort_job(request_id, model, count)
