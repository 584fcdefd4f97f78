"""Huey tasks of the inference app: API requests handed to the engines.

In the embedded default the consumer runs inside the server process (``inference.huey_consumer``);
``manage.py run_huey`` runs it elsewhere when Huey and the channel layer are shared (Redis).
"""
from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task, task

from inference.generation import GenerationJob, abort_job, run_job

# A job still queued after this long has lost its client (the view gave up waiting): skip it.
JOB_EXPIRES_SECONDS = 300


@task(expires=JOB_EXPIRES_SECONDS)
def generate(job: dict) -> None:
    run_job(GenerationJob(**job))


@task(priority=10, expires=JOB_EXPIRES_SECONDS)
def abort(request_id: str, model: str, count: int) -> None:
    abort_job(request_id, model, count)


def unload_idle_models() -> list:
    """Unload the models of this process's pool idle for longer than their TTL; their ids."""
    from inference.pool import get_pool

    return get_pool().unload_idle()


@db_periodic_task(crontab(minute="*"))
def enforce_model_ttls() -> None:
    """Every minute (Huey's finest schedule); returns None so that Huey stores no result."""
    unload_idle_models()
