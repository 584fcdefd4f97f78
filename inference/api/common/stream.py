"""The one streaming path of every API (OpenAI chat and completions, Responses, Anthropic
Messages, the console's chat): subscribe to the request's group, hand the job off, wait until the
worker accepts or refuses it, then turn its events into what the client receives through a
``Formatter``: SSE frames while it streams (``stream``), or one JSON body at the end (``collect``).

A client that goes away (Django closes the streaming iterator, the view or the console's task is
cancelled) aborts the job: every path ends in ``stop_generation``.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional

from django.conf import settings
from django.http import JsonResponse

from inference.api.common import handoff
from inference.dispatch import NoWorker
from inference.generation import GenerationJob
from inference.metrics import GenerationObserver
from inference.dispatch.relay import Subscription

from .errors import ApiError
from .sse import EventStreamResponse

logger = logging.getLogger("omlx.api")

# The worker answers (accepted or refused) after loading the model: allow for a large one.
ACCEPT_TIMEOUT_SECONDS = 900.0

OnFinish = Optional[Callable[[], Awaitable[None]]]


class Formatter:
    """One request's generation events (``inference.generation``: the "delta" events of its
    choices, in order) turned into its API's wire events, and those into frames.

    The loop calls ``start`` once the worker accepted the job, ``feed`` for every delta until
    ``finished``, then ``end`` unless a choice failed; each returns wire events, which ``frame``
    writes as one SSE frame (or websocket message) each. ``keepalive`` is the frame sent after
    settings.OMLX_SSE_KEEPALIVE_SECONDS without an event (None: wait without one). Without
    streaming, ``body()`` is the JSON body once ``finished``.

    Invariant: ``finished`` turns true once every choice has its finish_reason or one failed;
    ``failure`` is then the error of the failed choice (the client's error for it), else None.
    """

    keepalive: Optional[str] = None
    failure: Optional[ApiError] = None

    @property
    def finished(self) -> bool:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        """The generation ended as the engine meant it to (no abort of the job is needed)."""
        return self.failure is None

    def start(self, accepted: dict) -> List[Any]:
        """Wire events before the first delta; ``accepted`` is the worker's answer (its
        ``prompt_tokens`` per prompt)."""
        return []

    def feed(self, event: dict) -> List[Any]:
        raise NotImplementedError

    def end(self) -> List[Any]:
        return []

    def frame(self, out: Any) -> str:
        raise NotImplementedError

    def body(self) -> dict:
        raise NotImplementedError


async def respond(job: GenerationJob, fmt: Formatter, stream: bool, on_finish: OnFinish = None, key=None):
    """The response of an API route: an SSE stream, or the JSON body once the job finished.
    ``on_finish`` runs once the last event is in, before the last frames go out (Responses stores
    the response there, so a client that continues from it at once finds it). ``key``: the
    request's key labels (``request.omlx_key_labels``), for the per-key token counts."""
    subscription = await start_generation(job, key)
    if stream:
        return EventStreamResponse(frames(job, fmt, subscription, on_finish))
    return JsonResponse(await collect(job, fmt, subscription, on_finish))


async def frames(
    job: GenerationJob,
    fmt: Formatter,
    subscription: Subscription,
    on_finish: OnFinish = None,
    keepalive: bool = True,
) -> AsyncIterator[str]:
    """The job's frames as they come: keep-alives through silences (unless not ``keepalive``),
    the job stopped at the end (aborted when the client left or a choice failed)."""
    keepalive = keepalive and fmt.keepalive is not None
    wait = settings.OMLX_SSE_KEEPALIVE_SECONDS if keepalive else None
    done = False
    try:
        for out in fmt.start(subscription.accepted):
            yield fmt.frame(out)
        while not fmt.finished:
            event = await subscription.receive(wait)
            if event is None:
                if keepalive:
                    yield fmt.keepalive  # keeps proxies and clients waiting through a long prefill
                continue
            if event.get("kind") != "delta":
                continue
            outs = fmt.feed(event)
            if fmt.finished and on_finish is not None:
                await on_finish()
            for out in outs:
                yield fmt.frame(out)
        done = fmt.ok
        if done:
            for out in fmt.end():
                yield fmt.frame(out)
    finally:  # shielded: a cancel (the console's Stop grace, a socket closing) must not cut it
        await asyncio.shield(stop_generation(job, subscription, done))


async def collect(
    job: GenerationJob, fmt: Formatter, subscription: Subscription, on_finish: OnFinish = None
) -> dict:
    """The JSON body of the finished job; ApiError when a choice failed."""
    async with aclosing(frames(job, fmt, subscription, keepalive=False)) as outs:
        async for _ in outs:
            pass
    if fmt.failure is not None:
        raise fmt.failure
    if on_finish is not None:
        await on_finish()
    return fmt.body()


async def start_generation(job: GenerationJob, key=None) -> Subscription:
    """Subscribe to the job's events, hand it off and wait for the worker's answer; raises
    ApiError when it is refused (its status: 404, 429, 503...)."""
    subscription = Subscription(job.request_id)
    subscription.observer = GenerationObserver(job.model, job.n, key).observe  # /metrics: TTFT, tokens
    try:
        await subscription.__aenter__()
    except NoWorker as exc:  # the channel layer (Redis) cannot be reached
        raise ApiError(503, str(exc), code=exc.code) from None
    try:
        await handoff.submit(job)
        first = await subscription.receive(ACCEPT_TIMEOUT_SECONDS)
    except BaseException:
        await stop_generation(job, subscription, done=False)
        raise
    if first is None or first["kind"] != "accepted":
        await subscription.__aexit__()
        if first is None:
            handoff.abort(job)
            raise ApiError(503, "No worker took the request in time")
        code = first.get("code") or ("model_not_found" if first["status"] == 404 else None)
        raise ApiError(first["status"], first["message"], code=code)
    subscription.accepted = first  # the worker's answer: prompt_tokens per prompt
    return subscription


async def stop_generation(job: GenerationJob, subscription: Subscription, done: bool) -> None:
    """Unsubscribe; a job not ``done`` (the client left, an error) is aborted first."""
    if not done:
        try:
            handoff.abort(job)
        except Exception:
            logger.exception("aborting %s failed", job.request_id)
    await subscription.__aexit__()
