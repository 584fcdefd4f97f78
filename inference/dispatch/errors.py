"""The errors of the dispatch layer (apart from ``base`` so that the relay, which ``base``
uses, can raise them too)."""

from __future__ import annotations


class NoWorker(Exception):
    """No worker would take a job now. ``code`` names why (the API answers 503 with it):
    "no_worker", or "queue_unavailable" when the queue cannot be reached."""

    def __init__(self, message: str, code: str = "no_worker"):
        super().__init__(message)
        self.code = code


QUEUE_UNAVAILABLE = "The queue (Redis) cannot be reached"


def queue_unavailable(exc: BaseException):
    """The ``NoWorker`` (503 "queue_unavailable") for an error talking to Redis."""
    from redis import ResponseError

    if isinstance(exc, ResponseError):  # it answers, but no: out of memory, read-only replica...
        return NoWorker(f"The queue (Redis) refused the request: {exc}", code="queue_unavailable")
    return NoWorker(f"{QUEUE_UNAVAILABLE}: {exc}", code="queue_unavailable")
