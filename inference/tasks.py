"""Huey tasks of the inference app: API requests handed to the engines.

In the embedded default the consumer runs inside the server process (``inference.huey_consumer``).
With Redis (settings.OMLX_REDIS_URL) ``omlx worker`` or ``manage.py run_huey`` run it in other
processes: each announces itself (``inference.worker_presence``) and listens for aborts, which are
broadcast to every worker over the channel layer (the worker running a request may be any of them).
"""
from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task, on_shutdown, on_startup, task

from inference.generation import GenerationJob, abort_job, run_job

# A job still queued after this long has lost its client (the view gave up waiting): skip it.
JOB_EXPIRES_SECONDS = 300


@task(expires=JOB_EXPIRES_SECONDS)
def generate(job: dict) -> None:
    run_job(GenerationJob(**job))


@task(priority=10, expires=JOB_EXPIRES_SECONDS)
def abort(request_id: str, model: str, count: int) -> None:
    abort_job(request_id, model, count)


def on_control(event: dict) -> None:
    """A broadcast control event (``inference.relay.broadcast_control``)."""
    if event.get("kind") == "abort":
        abort_job(event["request_id"], event["model"], int(event["count"]))


@on_startup()
def announce_worker() -> None:
    """Every consumer (embedded, ``omlx worker``, ``manage.py run_huey``) runs this in each worker
    thread as it starts; with Redis the process listens for aborts and keeps its heartbeat."""
    from django.conf import settings

    if settings.OMLX_REDIS_URL:
        from inference import relay, worker_presence

        relay.listen_control(on_control)
        worker_presence.start_heartbeat()


@on_shutdown()
def withdraw_worker() -> None:
    """The consumer is stopping: take this process off the list of running workers."""
    from django.conf import settings

    if settings.OMLX_REDIS_URL:
        from inference import worker_presence

        worker_presence.stop_heartbeat()


def unload_idle_models() -> list:
    """Unload the models of this process's pool idle for longer than their TTL; their ids."""
    from inference.pool import get_pool

    return get_pool().unload_idle()


@db_periodic_task(crontab(minute="*"))
def enforce_model_ttls() -> None:
    """Every minute (Huey's finest schedule); returns None so that Huey stores no result."""
    unload_idle_models()
