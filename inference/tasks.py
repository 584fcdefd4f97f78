"""Huey tasks of the inference app: API requests handed to the engines (``generate`` and
``abort``, defined by the Huey dispatch backend, ``inference.dispatch.huey``), the models' TTLs, and
the hooks every consumer runs as it starts and stops.

In the embedded default the consumer runs inside the server process (``inference.dispatch.huey_consumer``).
With Redis (``inference.dispatch.redis``) ``omlx worker`` or ``manage.py run_huey`` run it in other
processes: each announces itself (``inference.dispatch.worker_presence``) and listens for aborts, which are
broadcast to every worker over the channel layer (the worker running a request may be any of them).
"""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task, on_shutdown, on_startup

from inference.dispatch.huey import abort, generate  # noqa: F401 (the consumer finds the tasks here)


@on_startup()
def announce_worker() -> None:
    """Every consumer (embedded, ``omlx worker``, ``manage.py run_huey``) runs this in each worker
    thread as it starts; with Redis the process listens for aborts and keeps its heartbeat."""
    from inference.dispatch import get_backend

    get_backend().worker_started()


@on_shutdown()
def withdraw_worker() -> None:
    """The consumer is stopping: take this process off the list of running workers."""
    from inference.dispatch import get_backend

    get_backend().worker_stopped()


def unload_idle_models() -> list:
    """Unload the models of this process's pool idle for longer than their TTL; their ids."""
    from inference.pool import get_pool

    return get_pool().unload_idle()


@db_periodic_task(crontab(minute="*"))
def enforce_model_ttls() -> None:
    """Every minute (Huey's finest schedule); returns None so that Huey stores no result."""
    unload_idle_models()


@db_periodic_task(crontab(minute="7"))
def delete_expired_responses() -> None:
    """Every hour: stored Responses older than OMLX_RESPONSE_TTL_DAYS (they hold prompts)."""
    from inference.api.responses.store import delete_expired

    delete_expired()
