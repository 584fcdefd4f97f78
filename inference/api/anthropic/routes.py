"""Anthropic-compatible routes: POST /v1/messages (streaming and not) and
POST /v1/messages/count_tokens. Mounted on a NinjaAPI of their own (inference/urls.py) so that
every error leaves in Anthropic's envelope (anthropic/errors.py)."""
from __future__ import annotations

import logging
import uuid

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse
from ninja import Router

from inference.generation import GenerationJob
from inference.pool import get_pool

from .format import PING, MessageBuilder, error_event, sse
from .input import chat_messages, openai_tool_choice, openai_tools, sampling_values, template_kwargs
from .schemas import CountTokensRequest, MessagesRequest
from .tokens import count_prompt_tokens
from inference.api.common.auth import check_api_key
from inference.api import limits
from inference.api.common.errors import ApiError
from inference.api.common.responder import start_generation, stop_generation
from inference.api.common.streaming import EventStreamResponse

logger = logging.getLogger("omlx.api")

router = Router(tags=["Anthropic"])


@router.post("/messages")
async def messages(request, body: MessagesRequest):
    check_api_key(request)
    _check_model(body.model)
    job = _job(body, f"msg_{uuid.uuid4().hex}", sampling_values(body))
    builder = MessageBuilder(job.request_id, body.model, body.stop_sequences or ())
    if body.stream:
        return await _stream(job, builder)
    subscription = await start_generation(job)
    done = False
    try:
        while not done:
            event = await subscription.receive()
            if event.get("kind") != "delta":
                continue
            if event["finish_reason"] in ("error", "abort"):
                raise ApiError(500, limits.failure_message(event))
            builder.feed(event)
            done = event["finish_reason"] is not None
    finally:
        await stop_generation(job, subscription, done)
    return JsonResponse(builder.message())


@router.post("/messages/count_tokens")
async def count_tokens(request, body: CountTokensRequest):
    check_api_key(request)
    _check_model(body.model)
    job = _job(body, f"count_{uuid.uuid4().hex}", {})
    count = await sync_to_async(count_prompt_tokens, thread_sensitive=False)(job)
    return {"input_tokens": count}


def _check_model(model_id: str) -> None:
    if get_pool().path(model_id) is None:
        raise ApiError(404, get_pool().not_found_message(model_id), param="model")


def _job(body, request_id: str, params: dict) -> GenerationJob:
    messages = chat_messages(body.system, body.messages)
    tools = openai_tools(body.tools)
    tool_choice, kwargs = openai_tool_choice(body.tool_choice, tools), template_kwargs(body.thinking)
    if kwargs.get("enable_thinking") and tool_choice not in (None, "auto", "none"):
        # as Anthropic's API: a forced tool call leaves no room for thinking first
        raise ApiError(400, "thinking may not be enabled when tool_choice forces tool use", param="thinking")
    extra = {"tools": tools, "tool_choice": tool_choice, "chat_template_kwargs": kwargs,
             "parallel_tool_calls": not (body.tool_choice or {}).get("disable_parallel_tool_use", False)}
    return GenerationJob(request_id, body.model, params, messages=messages, **extra)


async def _stream(job: GenerationJob, builder: MessageBuilder) -> EventStreamResponse:
    subscription = await start_generation(job)
    # message_start carries the prompt's token count, as the worker counted it when it took the job
    input_tokens = subscription.accepted["prompt_tokens"][0]
    return EventStreamResponse(_events(job, builder, subscription, input_tokens))


async def _events(job, builder: MessageBuilder, subscription, input_tokens: int):
    keepalive = settings.OMLX_SSE_KEEPALIVE_SECONDS
    done = False
    try:
        for event in builder.start_events(input_tokens):
            yield sse(event)
        while not done:
            event = await subscription.receive(keepalive)
            if event is None:
                yield sse(PING)  # keeps clients and proxies waiting through a long prefill
                continue
            if event.get("kind") != "delta":
                continue
            if event["finish_reason"] in ("error", "abort"):
                yield sse(error_event("api_error", limits.failure_message(event)))
                return
            for out in builder.feed(event):
                yield sse(out)
            done = event["finish_reason"] is not None
    finally:
        await stop_generation(job, subscription, done)
