"""OpenAI-compatible routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions."""

from __future__ import annotations

import time
from datetime import datetime, timezone
import uuid

from ninja import Router

from inference.api.common import caps
from inference.api.common.auth import check_api_key
from inference.api.common.cache_salt import effective_salt
from inference.keys import scopes
from inference.api.common.chat_job import tool_options
from inference.api.common.errors import ApiError
from inference.api.common.model_check import check_model
from inference.api.common.sampling import SPECULATIVE_NAMES, checked_params, speculative_fields
from inference.api.common.stream import respond
from inference.chat.structured import response_format_structured
from inference.chat.template import check_template_kwargs
from inference.generation import GenerationJob
from inference.pool import get_pool
from inference.vision.limits import ImageLimits
from inference.vision.parts import check_count

from .format import ChatFormat, CompletionFormat
from .schemas import ChatCompletionRequest, CompletionRequest

router = Router(tags=["OpenAI"])
_started = int(time.time())


@router.get("/models")
def list_models(request):
    """The servable models, in OpenAI's list format; in Anthropic's when the request comes from an
    Anthropic client (it sends ``anthropic-version``), so both SDKs' ``models.list()`` work. Each
    entry says whether the model reads images (``vision``, docs/vision.md), where it came from
    (``origin``: model dir, Hugging Face cache, LM Studio) and a LoRA adapter's base model (``base``,
    docs/models.md; null for a model); the SDKs keep such extra fields."""
    check_api_key(request, scopes.INFERENCE)
    pool = get_pool()
    ids = pool.ids()
    folders = pool.folders()
    vision = {model_id: bool(folders[model_id].vision) if model_id in folders else False for model_id in ids}
    base = {model_id: folders[model_id].base if model_id in folders else None for model_id in ids}
    origin = {model_id: folders[model_id].origin if model_id in folders else None for model_id in ids}
    if "anthropic-version" in request.headers:
        created = datetime.fromtimestamp(_started, tz=timezone.utc).isoformat().replace("+00:00", "Z")
        data = [
            {
                "type": "model",
                "id": model_id,
                "display_name": model_id,
                "created_at": created,
                "lifecycle": "active",
                "vision": vision[model_id],
                "base": base[model_id],
                "origin": origin[model_id],
            }
            for model_id in ids
        ]
        return {
            "data": data,
            "has_more": False,
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
        }
    data = [
        {
            "id": model_id,
            "object": "model",
            "created": _started,
            "owned_by": "omlx",
            "vision": vision[model_id],
            "base": base[model_id],
            "origin": origin[model_id],
        }
        for model_id in ids
    ]
    return {"object": "list", "data": data}


@router.post("/chat/completions")
async def chat_completions(request, body: ChatCompletionRequest):
    check_api_key(request, scopes.INFERENCE)
    check_model(body.model)
    _check_chat_caps(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise ApiError(400, "top_logprobs requires logprobs to be true", param="top_logprobs")
    try:
        messages = [m.template_dict(f"messages[{i}]") for i, m in enumerate(body.messages)]
        check_count(messages, ImageLimits.from_settings())
    except ValueError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    tools, tool_choice, structured, template_kwargs = _chat_options(body)
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    job = GenerationJob(
        f"chatcmpl-{uuid.uuid4().hex}",
        body.model,
        _params(body, max_tokens, logprobs, structured, body.n),
        body.n,
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        chat_template_kwargs=template_kwargs,
        parallel_tool_calls=body.parallel_tool_calls,
        cache_salt=effective_salt(request, body.cache_salt),
    )
    return await respond(job, _format(ChatFormat, job, body), body.stream, key=request.omlx_key_labels)


@router.post("/completions")
async def completions(request, body: CompletionRequest):
    check_api_key(request, scopes.INFERENCE)
    check_model(body.model)
    if body.max_tokens == 0 and not body.echo:
        raise ApiError(400, "max_tokens 0 is only for echo (scoring the prompt)", param="max_tokens")
    echo_only = body.echo and body.max_tokens == 0  # scoring the prompt: nothing generated
    prompts = body.prompt
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if not prompts:
        raise ApiError(400, "the prompt is empty", param="prompt")
    job = GenerationJob(
        f"cmpl-{uuid.uuid4().hex}",
        body.model,
        _params(body, None if echo_only else body.max_tokens, body.logprobs, choices=body.n * len(prompts)),
        body.n,
        prompts=list(prompts),
        cache_salt=effective_salt(request, body.cache_salt),
        echo=body.echo,
        echo_only=echo_only,
    )
    return await respond(job, _format(CompletionFormat, job, body), body.stream, key=request.omlx_key_labels)


def _format(cls, job: GenerationJob, body) -> ChatFormat:
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return cls(job.request_id, body.model, len(job.choice_ids()), job.n, include_usage)


def _chat_options(body):
    """tools, tool_choice, the structured-output constraint and the template kwargs of a chat
    request, checked: bad values are a 400 before anything is queued (the worker takes them as
    they are)."""
    try:
        tools, tool_choice, forced = tool_options(body.tools, body.tool_choice)
        structured = response_format_structured(body.response_format)
        if structured is not None and forced is not None:
            raise ValueError(
                "response_format: cannot be combined with tool_choice 'required' or a named tool"
            )
        structured = structured or forced
        template_kwargs = check_template_kwargs(body.chat_template_kwargs)
    except ValueError as exc:
        raise ApiError(400, str(exc), param=str(exc).split(":")[0].split(".")[0].split("[")[0]) from None
    return tools, tool_choice, structured, template_kwargs


def _check_chat_caps(body: ChatCompletionRequest) -> None:
    """The caps of inference/api/common/caps.py on what a chat request can make large."""
    caps.count(body.messages, caps.MAX_MESSAGES, "messages", "messages")
    caps.content_parts(body.messages, "messages")
    caps.tools(body.tools)
    if isinstance(body.response_format, dict):
        caps.json_bytes(
            body.response_format.get("json_schema"), caps.MAX_SCHEMA_BYTES, "response_format", "the schema"
        )
    caps.json_bytes(
        body.chat_template_kwargs, caps.MAX_TEMPLATE_KWARGS_BYTES, "chat_template_kwargs", "the kwargs"
    )


def _params(body, max_tokens, logprobs, structured=None, choices: int = 1) -> dict:
    """SamplingParams fields from the body (unset fields keep the engine's defaults)."""
    return checked_params(
        {
            "max_tokens": max_tokens,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "top_k": body.top_k,
            "min_p": body.min_p,
            "presence_penalty": body.presence_penalty,
            "frequency_penalty": body.frequency_penalty,
            "repetition_penalty": body.repetition_penalty,
            "seed": body.seed,
            "stop": body.stop,
            "logprobs": logprobs,
            "ignore_eos": body.ignore_eos,
            "structured": structured,
            "priority": body.priority,
            **speculative_fields(body.speculative),
        },
        choices=choices,
        names=SPECULATIVE_NAMES,
    )
