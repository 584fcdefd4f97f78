"""POST /v1/responses: OpenAI's Responses API over the same generation path as chat completions.

The request becomes one chat ``GenerationJob`` (``responses.input``); its events become the
Response object or its stream of typed events (``responses.format``). Finished responses are
stored (``responses.store``) unless ``store`` is false, so that ``previous_response_id`` can
continue a conversation; GET / DELETE /v1/responses/{id} and .../input_items read and remove them.
"""

from __future__ import annotations

import uuid
from typing import List, Optional

from django.http import JsonResponse
from ninja import Router

from inference.api.common import caps
from inference.api.common.auth import check_api_key
from inference.api.common.cache_salt import effective_salt
from inference.keys import scopes
from inference.api.common.chat_job import chat_job
from inference.api.common.errors import ApiError
from inference.api.common.model_check import check_model
from inference.api.common.sampling import SPECULATIVE_NAMES, checked_params, speculative_fields
from inference.api.common.stream import respond

from . import store
from .format import ResponseBuilder
from .input import stored_items, to_messages, to_structured, to_tool_choice, to_tools
from .schemas import ResponsesRequest

router = Router(tags=["OpenAI"])


@router.post("/responses")
async def create_response(request, body: ResponsesRequest):
    check_api_key(request, scopes.INFERENCE)
    check_model(body.model)
    _check_caps(body)
    context = []
    if body.previous_response_id is not None:
        context = await store.context(body.previous_response_id)
    job, echo = _job(body, context)
    job.cache_salt = effective_salt(request, body.cache_salt)
    builder = ResponseBuilder(job.request_id, body.model, echo)
    saver = _Saver(body, builder)
    return await respond(job, builder, body.stream, on_finish=saver.save, key=request.omlx_key_labels)


@router.get("/responses/{response_id}")
async def retrieve_response(request, response_id: str):
    check_api_key(request, scopes.INFERENCE)
    return JsonResponse((await store.get(response_id)).body)


@router.delete("/responses/{response_id}")
async def delete_response(request, response_id: str):
    check_api_key(request, scopes.INFERENCE)
    await store.delete(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.get("/responses/{response_id}/input_items")
async def list_input_items(
    request, response_id: str, limit: int = 20, order: str = "desc", after: Optional[str] = None
):
    """The request's own input items (not those of earlier responses of its chain), paginated
    as OpenAI's lists: ``order`` asc/desc, ``limit`` 1-100, ``after`` an item id."""
    check_api_key(request, scopes.INFERENCE)
    if not 1 <= limit <= 100:
        raise ApiError(400, f"limit={limit}: must be in [1, 100]", param="limit")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order={order!r}: must be 'asc' or 'desc'", param="order")
    items = (await store.get(response_id)).input_items
    if order == "desc":
        items = items[::-1]
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(400, f"after={after!r}: no input item of this response has that id", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


class _Saver:
    """Stores a finished response (before its last stream event goes out, so a client that
    continues from it at once finds it)."""

    def __init__(self, body: ResponsesRequest, builder: ResponseBuilder):
        self.items = stored_items(body.input) if body.store is not False else None
        self.builder = builder

    async def save(self) -> None:
        builder = self.builder
        if self.items is not None and builder.status in ("completed", "incomplete"):
            await store.save(builder.body(), self.items)


def _check_caps(body: ResponsesRequest) -> None:
    """The caps of inference/api/common/caps.py on what a request can make large."""
    caps.count(body.input, caps.MAX_MESSAGES, "input", "input items")
    caps.content_parts(body.input if isinstance(body.input, list) else (), "input")
    caps.tools(body.tools)
    if isinstance(body.text, dict):
        caps.json_bytes(body.text.get("format"), caps.MAX_SCHEMA_BYTES, "text.format", "the schema")
    caps.metadata(body.metadata)
    caps.chars(body.user, caps.MAX_USER_CHARS, "user")


def _job(body: ResponsesRequest, context: List[dict]):
    """The GenerationJob of a request and the fields its Response object repeats."""
    messages = to_messages(body.input, body.instructions, context)
    chat_tools, echo_tools = to_tools(body.tools)
    tool_choice, echo_choice = to_tool_choice(body.tool_choice, echo_tools)
    structured, echo_text = to_structured(body.text)
    extra = {}
    if chat_tools is not None:
        extra["tools"] = chat_tools
        if tool_choice is not None:
            extra["tool_choice"] = tool_choice
    effort = body.reasoning.effort if body.reasoning else None
    if effort is not None:
        # Templates with a thinking switch (Qwen3 and others) honour it; the others ignore it.
        extra["chat_template_kwargs"] = {"enable_thinking": effort != "none"}
    params = _params(body, structured)
    try:
        job = chat_job(f"resp_{uuid.uuid4().hex}", body.model, params, 1, messages=messages, **extra)
    except ValueError as exc:  # tools the chat template cannot be offered (a name given twice)
        raise ApiError(400, str(exc)) from None
    echo = {
        "instructions": body.instructions,
        "tools": echo_tools,
        "tool_choice": echo_choice,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_output_tokens": body.max_output_tokens,
        "text": echo_text,
        "reasoning": {"effort": effort} if effort is not None else None,
        "metadata": body.metadata or {},
        "user": body.user,
        "store": body.store is not False,
        "previous_response_id": body.previous_response_id,
    }
    return job, echo


def _params(body: ResponsesRequest, structured) -> dict:
    return checked_params(
        {
            "max_tokens": body.max_output_tokens,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "top_k": body.top_k,
            "min_p": body.min_p,
            "repetition_penalty": body.repetition_penalty,
            "seed": body.seed,
            "stop": body.stop,
            "ignore_eos": body.ignore_eos,
            "structured": structured,
            "priority": body.priority,
            **speculative_fields(body.speculative),
        },
        names={"max_tokens": "max_output_tokens", "structured": "text.format", **SPECULATIVE_NAMES},
    )
