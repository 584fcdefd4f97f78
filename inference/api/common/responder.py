"""The view side of a generation: subscribe to the request's group, hand the job off, wait until
the worker accepts or refuses it, then stream the events back (SSE) or collect them (JSON).

A client that goes away (Django cancels the view or the streaming iterator) aborts the job.
``start_generation`` / ``stop_generation`` are the two halves every route uses (OpenAI, Anthropic,
Responses, the admin console's chat): admission, hand-off, the accepted/refused answer, abort.
"""
from __future__ import annotations

import json
import logging
from typing import AsyncIterator, Dict, List

from django.conf import settings
from django.http import JsonResponse

from inference.generation import GenerationJob
from inference.metrics import GenerationObserver
from inference.relay import Subscription

from inference.api import handoff
from inference.api import limits
from .errors import ApiError
from inference.api.openai.format import usage_body
from .streaming import EventStreamResponse

logger = logging.getLogger("omlx.api")

# The worker answers (accepted or refused) after loading the model: allow for a large one.
ACCEPT_TIMEOUT_SECONDS = 900.0


async def respond(job: GenerationJob, fmt, stream: bool, include_usage: bool = False):
    subscription = await start_generation(job)
    if stream:
        return EventStreamResponse(_sse(job, fmt, subscription, include_usage))
    done = False
    try:
        choices = await _collect(job, subscription)
        done = True
    finally:
        await stop_generation(job, subscription, done)
    usages = {c["index"]: c["usage"] for c in choices}
    return JsonResponse(fmt.response(choices, usage_body(usages, job.n)))


async def start_generation(job: GenerationJob) -> Subscription:
    """Subscribe to the job's events, hand it off and wait for the worker's answer; raises
    ApiError when it is refused (its status: 404, 429, 503...)."""
    subscription = Subscription(job.request_id)
    subscription.observer = GenerationObserver(job.model, job.n).observe  # /metrics: TTFT, tokens
    await subscription.__aenter__()
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
        raise ApiError(first["status"], first["message"],
                       code="model_not_found" if first["status"] == 404 else None)
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


async def _collect(job: GenerationJob, subscription: Subscription) -> List[dict]:
    """Every choice's events added up: {"index", "text", "reasoning", "tool_calls", "logprobs",
    "finish_reason", "usage"}."""
    choices: Dict[int, dict] = {
        i: {"index": i, "text": "", "reasoning": "", "tool_calls": [], "logprobs": None,
            "finish_reason": None, "usage": None}
        for i in range(len(job.choice_ids()))
    }
    pending = set(choices)
    while pending:
        event = await subscription.receive()
        choice = choices[event["index"]]
        choice["text"] += event["text"]
        choice["reasoning"] += event.get("reasoning") or ""
        choice["tool_calls"] += event.get("tool_calls") or []
        if event["logprobs"]:
            choice["logprobs"] = (choice["logprobs"] or []) + event["logprobs"]
        if event["finish_reason"] is not None:
            _check_finished(event)
            choice.update(finish_reason=event["finish_reason"], usage=event["usage"])
            pending.discard(event["index"])
    return [choices[i] for i in sorted(choices)]


def _check_finished(event: dict) -> None:
    if event["finish_reason"] == "abort" and limits.shutting_down():  # omlx_site/shutdown.py
        raise ApiError(503, "The server is shutting down; the request was aborted",
                       code="server_shutting_down")
    if event["finish_reason"] in ("error", "abort"):
        raise ApiError(500, f"Generation failed: {event['error'] or event['finish_reason']}")


async def _sse(job: GenerationJob, fmt, subscription: Subscription, include_usage: bool) -> AsyncIterator[str]:
    pending = set(range(len(job.choice_ids())))
    usages: Dict[int, dict] = {}
    keepalive = settings.OMLX_SSE_KEEPALIVE_SECONDS
    done = False
    try:
        for chunk in fmt.start_chunks(len(pending)):
            yield _data(chunk)
        while pending:
            event = await subscription.receive(keepalive)
            if event is None:
                yield ": keep-alive\n\n"  # an SSE comment: keeps proxies and clients waiting
                continue
            if event["finish_reason"] is not None:
                try:
                    _check_finished(event)
                except ApiError as exc:
                    yield _data({"error": {"message": exc.message, "type": exc.type,
                                           "param": None, "code": exc.code}})
                    return
                usages[event["index"]] = event["usage"]
                pending.discard(event["index"])
            chunk = fmt.delta_chunk(event)
            if chunk is not None:
                yield _data(chunk)
        done = True
        if include_usage:
            yield _data(fmt.usage_chunk(usage_body(usages, job.n)))
        yield "data: [DONE]\n\n"
    finally:
        await stop_generation(job, subscription, done)


def _data(body: dict) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"
