"""POST /v1/responses: OpenAI's Responses API over the same generation path as chat completions.

The request becomes one chat ``GenerationJob`` (``responses_input``); its events become the
Response object or its stream of typed events (``responses_format``). Responses are not stored,
so ``previous_response_id`` and item references are refused with a 400.
"""
from __future__ import annotations

import json
import uuid
from typing import AsyncIterator

from django.conf import settings
from django.http import JsonResponse, StreamingHttpResponse
from ninja import Router

from inference.engine import SamplingParams
from inference.generation import GenerationJob
from inference.model_registry import get_registry
from inference.relay import Subscription

from .auth import check_api_key
from .errors import ApiError
from .responder import _start, _stop
from .responses_format import ResponseBuilder
from .responses_input import to_messages, to_structured, to_tool_choice, to_tools
from .responses_schemas import ResponsesRequest

router = Router(tags=["OpenAI"])


@router.post("/responses")
async def create_response(request, body: ResponsesRequest):
    check_api_key(request)
    if get_registry().path(body.model) is None:
        raise ApiError(404, f"The model '{body.model}' does not exist", param="model", code="model_not_found")
    if body.previous_response_id is not None:
        raise ApiError(400, "previous_response_id is not supported: omlx does not store responses; "
                            "send the whole conversation in 'input'", param="previous_response_id")
    job, echo = _job(body)
    builder = ResponseBuilder(job.request_id, body.model, echo)
    subscription = await _start(job)
    if body.stream:
        response = StreamingHttpResponse(_sse(job, builder, subscription), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    done = False
    try:
        while not builder.finished:
            builder.feed(await subscription.receive())
        done = builder.status != "failed"
    finally:
        await _stop(job, subscription, done)
    if builder.status == "failed":
        raise ApiError(500, builder.error["message"])
    return JsonResponse(builder.body())


def _job(body: ResponsesRequest):
    """The GenerationJob of a request and the fields its Response object repeats. Fields that
    GenerationJob / SamplingParams do not have in this build (tools, structured output) are a 400
    when asked for, never silently dropped."""
    messages = to_messages(body.input, body.instructions)
    chat_tools, echo_tools = to_tools(body.tools)
    tool_choice, echo_choice = to_tool_choice(body.tool_choice, echo_tools)
    structured, echo_text = to_structured(body.text)
    job_fields = GenerationJob.__dataclass_fields__
    extra = {}
    if chat_tools is not None:
        if "tools" not in job_fields:
            raise ApiError(400, "tools: function tools are not supported by this server", param="tools")
        extra["tools"] = chat_tools
        if tool_choice is not None:
            extra["tool_choice"] = tool_choice
    effort = body.reasoning.effort if body.reasoning else None
    if effort is not None and "chat_template_kwargs" in job_fields:
        # Templates with a thinking switch (Qwen3 and others) honour it; the others ignore it.
        extra["chat_template_kwargs"] = {"enable_thinking": effort != "none"}
    params = _params(body, structured)
    job = GenerationJob(f"resp_{uuid.uuid4().hex}", body.model, params, 1, messages=messages, **extra)
    echo = {
        "instructions": body.instructions, "tools": echo_tools, "tool_choice": echo_choice,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
        "text": echo_text, "reasoning": {"effort": effort} if effort is not None else None,
        "metadata": body.metadata or {}, "user": body.user, "store": False,
    }
    return job, echo


def _params(body: ResponsesRequest, structured) -> dict:
    values = {"max_tokens": body.max_output_tokens, "temperature": body.temperature, "top_p": body.top_p,
              "top_k": body.top_k, "min_p": body.min_p, "repetition_penalty": body.repetition_penalty,
              "seed": body.seed, "stop": body.stop}
    values = {k: v for k, v in values.items() if v is not None}
    if body.ignore_eos:
        values["ignore_eos"] = True
    if isinstance(body.stop, list) and len(body.stop) > 4:
        raise ApiError(400, "stop: at most 4 stop sequences", param="stop")
    if structured is not None:
        if "structured" not in SamplingParams.__dataclass_fields__:
            raise ApiError(400, f"text.format: '{structured['type']}' is not supported by this server",
                           param="text.format")
        values["structured"] = structured
    try:
        SamplingParams(**values)
    except ValueError as exc:
        error = ApiError.bad_value(exc)
        if error.param == "max_tokens":
            error = ApiError(400, error.message.replace("max_tokens=", "max_output_tokens=", 1),
                             param="max_output_tokens")
        raise error from None
    if "stop" in values:
        values["stop"] = list(SamplingParams(**values).stop)  # a JSON-able list for the job
    return values


async def _sse(job: GenerationJob, builder: ResponseBuilder, subscription: Subscription) -> AsyncIterator[str]:
    keepalive = settings.OMLX_SSE_KEEPALIVE_SECONDS
    done = False
    try:
        for event in builder.start():
            yield _sse_event(event)
        while not builder.finished:
            event = await subscription.receive(keepalive)
            if event is None:
                yield ": keep-alive\n\n"  # an SSE comment: keeps proxies and clients waiting
                continue
            for out in builder.feed(event):
                yield _sse_event(out)
        done = builder.status != "failed"
    finally:
        await _stop(job, subscription, done)


def _sse_event(event: dict) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
