"""Admission control of the API: how many choices of one model may be in flight in this server,
and whether a worker can take a job at all (the dispatch backend says, ``inference.dispatch``).
The server's lifecycle (starting, shutting down) is ``inference.lifecycle``.

A model may have ``OMLX_MAX_CONCURRENT_REQUESTS`` choices running plus ``OMLX_MAX_QUEUED_REQUESTS``
waiting; a request that would go beyond is refused before it is queued (429, Retry-After). While
the memory guard reports pressure, every new request is refused (503, Retry-After). A
choice counts from the hand-off until the view stops listening to it (finished, failed, or the
client gone). Counted per server process, in engine requests (a request with n=4 counts 4).
"""

from __future__ import annotations

import threading
from typing import Dict

from django.conf import settings

from inference import lifecycle
from inference.dispatch import NoWorker, get_backend

from .errors import ApiError

_in_flight: Dict[str, int] = {}
_jobs: Dict[str, object] = {}  # request id -> job admitted and not released (a stopping server aborts them)
_lock = threading.Lock()


def capacity() -> int:
    return settings.OMLX_MAX_CONCURRENT_REQUESTS + settings.OMLX_MAX_QUEUED_REQUESTS


def admit(job) -> None:
    """Count ``job``'s choices in; ApiError 429 if its model is full (400 if it never fits)."""
    count = len(job.choice_ids())
    limit = capacity()
    if count > limit:
        raise ApiError(
            400,
            f"the request asks for {count} choices; this server takes at most {limit} per model at once",
            param="n",
        )
    with _lock:
        used = _in_flight.get(job.model, 0)
        if used + count > limit:
            raise ApiError(
                429,
                f"The model '{job.model}' has {used} requests running or waiting "
                f"(limit {limit}); retry later",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(settings.OMLX_RETRY_AFTER_SECONDS)},
            )
        _in_flight[job.model] = used + count
        _jobs[job.request_id] = job


def check_memory() -> None:
    """ApiError 503 (Retry-After) while the memory guard of this process refuses new requests
    (inference/pool/memory_guard.py)."""
    from inference.pool.memory_guard import MemoryPressure, admit as guard_admits

    try:
        guard_admits()
    except MemoryPressure as exc:
        raise ApiError(
            503, str(exc), code="memory_pressure", headers={"Retry-After": str(exc.retry_after)}
        ) from None


def release(job) -> None:
    count = len(job.choice_ids())
    with _lock:
        _jobs.pop(job.request_id, None)
        left = _in_flight.get(job.model, 0) - count
        if left > 0:
            _in_flight[job.model] = left
        else:
            _in_flight.pop(job.model, None)


def in_flight(model: str) -> int:
    with _lock:
        return _in_flight.get(model, 0)


def in_flight_by_model() -> Dict[str, int]:
    """Model -> choices in flight in this server (models with none are left out)."""
    with _lock:
        return dict(_in_flight)


def jobs_in_flight() -> list:
    """The jobs admitted and not released yet, in every model."""
    with _lock:
        return list(_jobs.values())


def failure_message(event: dict) -> str:
    """What a client is told about a choice that ended with "error" or "abort"."""
    if event["finish_reason"] == "abort" and lifecycle.shutting_down():  # omlx_site/shutdown.py aborted it
        return "The server is shutting down; the request was aborted"
    return f"Generation failed: {event.get('error') or event['finish_reason']}"


def check_workers() -> None:
    """ApiError 503 when the server is stopping or no worker would take a job (blocking: Redis)."""
    if lifecycle.shutting_down():
        raise ApiError(503, "The server is shutting down", code="server_shutting_down")
    try:
        get_backend().available()
    except NoWorker as exc:
        raise ApiError(503, str(exc), code=exc.code) from None
