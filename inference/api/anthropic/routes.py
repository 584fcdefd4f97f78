"""Anthropic-compatible routes: POST /v1/messages (streaming and not) and
POST /v1/messages/count_tokens. Mounted on a NinjaAPI of their own (inference/urls.py) so that
every error leaves in Anthropic's envelope (anthropic/errors.py)."""

from __future__ import annotations

import uuid

from asgiref.sync import sync_to_async
from ninja import Router

from inference.api.common import caps
from inference.api.common.auth import check_api_key
from inference.api.common.cache_salt import effective_salt
from inference.keys import scopes
from inference.api.common.chat_job import chat_job
from inference.api.common.errors import ApiError
from inference.api.common.model_check import check_model
from inference.api.common.stream import respond
from inference.generation import GenerationJob

from .format import MessageBuilder
from .input import chat_messages, openai_tool_choice, openai_tools, sampling_values, template_kwargs
from .schemas import CountTokensRequest, MessagesRequest
from .tokens import count_prompt_tokens

router = Router(tags=["Anthropic"])


@router.post("/messages")
async def messages(request, body: MessagesRequest):
    check_api_key(request, scopes.INFERENCE)
    check_model(body.model)
    _check_caps(body)
    job = _job(body, f"msg_{uuid.uuid4().hex}", sampling_values(body))
    job.cache_salt = effective_salt(request, body.cache_salt)
    builder = MessageBuilder(job.request_id, body.model, body.stop_sequences or ())
    return await respond(job, builder, body.stream, key=request.omlx_key_labels)


@router.post("/messages/count_tokens")
async def count_tokens(request, body: CountTokensRequest):
    check_api_key(request, scopes.INFERENCE)
    check_model(body.model)
    _check_caps(body)
    job = _job(body, f"count_{uuid.uuid4().hex}", {})
    count = await sync_to_async(count_prompt_tokens, thread_sensitive=False)(job)
    return {"input_tokens": count}


def _check_caps(body) -> None:
    """The caps of inference/api/common/caps.py on what a request can make large."""
    caps.count(body.messages, caps.MAX_MESSAGES, "messages", "messages")
    caps.content_parts(body.messages, "messages")
    caps.count(body.system, caps.MAX_CONTENT_PARTS, "system", "system blocks")
    caps.tools(body.tools)
    for name in ("output_config", "output_format"):
        caps.json_bytes(getattr(body, name, None), caps.MAX_SCHEMA_BYTES, name, "the schema")


def _job(body, request_id: str, params: dict) -> GenerationJob:
    messages = chat_messages(body.system, body.messages)
    tools = openai_tools(body.tools)
    tool_choice, kwargs = openai_tool_choice(body.tool_choice, tools), template_kwargs(body.thinking)
    if kwargs.get("enable_thinking") and tool_choice not in (None, "auto", "none"):
        # as Anthropic's API: a forced tool call leaves no room for thinking first
        raise ApiError(400, "thinking may not be enabled when tool_choice forces tool use", param="thinking")
    parallel = not (body.tool_choice or {}).get("disable_parallel_tool_use", False)
    try:
        return chat_job(
            request_id,
            body.model,
            params,
            messages=messages,
            tools=tools,
            tool_choice=tool_choice,
            chat_template_kwargs=kwargs,
            parallel_tool_calls=parallel,
        )
    except ValueError as exc:  # tools the chat template cannot be offered (a name given twice)
        raise ApiError(400, str(exc)) from None
