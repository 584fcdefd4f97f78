"""The worker side of an API request: a ``GenerationJob`` handed to a model's engine, its events
published to the request's channel-layer group (``inference.dispatch.relay``).

The Huey task (``inference.tasks``) and the direct hand-off of the view share all of this; only
how a job reaches ``run_job`` differs.

Events (plain dicts, the same over any channel layer):
    {"kind": "accepted", "prompt_tokens": [int], "model"}  the engine took every choice of the
                                              job; the token count of each prompt (one for chat);
                                              the model's id (the request may name an alias)
    {"kind": "error", "status", "message"}    the job was refused (nothing else follows)
    {"kind": "delta", "index", "text", "reasoning", "tool_calls", "token_ids", "logprobs",
     "finish_reason", "usage", "error"}
        new output of choice ``index``: answer ``text`` (no reasoning, no tool-call markup),
        ``reasoning`` text, and ``tool_calls`` completed with this delta ([{"id", "name",
        "arguments"}], arguments as JSON text). The last delta of a choice has ``finish_reason``
        ("stop", "length", "tool_calls" when a normal stop came after tool calls, "abort",
        "error") and ``usage`` ({"prompt_tokens", "completion_tokens", "cached_tokens",
        "hot_cached_tokens", "cold_cached_tokens"}: cached = hot + cold, the prompt tokens whose KV
        came from the hot tier (RAM) or the cold tier (SSD); the rest were computed).

A chat job is rendered with the model's chat template (``inference.chat.template``) and each of
its choices is parsed (``inference.chat.output``): tools are offered to the template unless
tool_choice is "none"; with tool_choice "auto" the model's calls are parsed out of its output;
"required" or a named function constrains the output (``SamplingParams.structured``, put in the
params by the view) to one call. Plain prompts (text completions) are neither rendered nor parsed.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Dict, List, Optional, Tuple, Union

from inference import echo
from inference.dispatch import relay
from inference.chat.capabilities import capabilities
from inference.chat.harmony_output import HarmonyParser
from inference.chat.output import OutputParser, ParsedDelta, ToolChoiceParser
from inference.chat.reasoning import prompt_opens_reasoning
from inference.chat.structured import forces_call
from inference.chat.template import render_prompt
from inference.vision.parts import image_urls

logger = logging.getLogger("omlx.api")

Publish = Callable[[str, dict], None]
ABORT_MEMORY_SECONDS = 600.0


@dataclass
class GenerationJob:
    """What the view asks of a worker. ``messages`` for chat, else ``prompts`` (strings or token
    id lists); every prompt gets ``n`` choices, numbered prompt by prompt.

    The view sends it checked whole (``inference.api.common.chat_job``, ``sampling``): the worker
    checks none of params, tools, tool_choice or the structured-output constraint again; it adds
    the model's settings, renders and counts the prompt. Plain fields only: it crosses the Huey
    queue as ``to_dict()``."""

    request_id: str
    model: str
    params: dict  # SamplingParams fields, checked by the view; ``structured`` includes a forced tool call's
    n: int = 1
    messages: Optional[List[dict]] = None
    prompts: List[Union[str, List[int]]] = field(default_factory=list)
    tools: Optional[List[dict]] = None  # OpenAI form: {"type": "function", "function": {...}}
    tool_choice: Union[str, dict, None] = None  # "none" | "auto" | "required" | {"type": "function", ...}
    chat_template_kwargs: dict = field(default_factory=dict)
    parallel_tool_calls: bool = True
    # The prefix-cache namespace (inference.api.common.cache_salt.effective_salt); None: unsalted.
    cache_salt: Optional[str] = None
    # /v1/completions' echo: each choice starts with its prompt (inference.echo); echo_only:
    # max_tokens 0, the prompt (and its logprobs) without generating.
    echo: bool = False
    echo_only: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def choice_ids(self) -> List[str]:
        count = self.n * (1 if self.messages is not None else len(self.prompts))
        return [f"{self.request_id}-{i}" for i in range(count)]


_aborted: Dict[str, float] = {}  # request ids aborted before their job ran -> when
_aborted_lock = threading.Lock()


def abort_job(request_id: str, model: str, count: int) -> None:
    """Abort every choice of a request, whether its job ran already or not."""
    from inference.pool import get_pool

    now = time.monotonic()
    with _aborted_lock:
        for key, when in list(_aborted.items()):
            if now - when > ABORT_MEMORY_SECONDS:
                del _aborted[key]
        _aborted[request_id] = now
    engine = get_pool().loaded(model)
    if engine is not None:
        for i in range(count):
            engine.abort(f"{request_id}-{i}")


def _was_aborted(request_id: str) -> bool:
    with _aborted_lock:
        return _aborted.pop(request_id, None) is not None


def run_job(job: GenerationJob, publish: Publish = relay.publish) -> None:
    """Hand ``job`` to its model's engine; every outcome is published, nothing is raised.
    The model's settings fill in the sampling parameters and template kwargs the request left
    out, and its context limit bounds the prompt."""
    from inference.engine import ModelLoadError
    from inference.pool import InsufficientMemory, ModelUnavailable, get_pool
    from inference.pool.errors import ModelDown

    def refuse(status: int, message: str) -> None:
        publish(job.request_id, {"kind": "error", "status": status, "message": message})

    if _was_aborted(job.request_id):
        return
    pool = get_pool()
    kind = pool.kind(job.model)
    if kind not in (None, "llm"):
        endpoint = "/v1/embeddings" if kind == "embedding" else "/v1/rerank"
        return refuse(
            400,
            f"The model '{job.model}' is {'an' if kind == 'embedding' else 'a'} {kind} "
            f"model: it does not generate text (use {endpoint})",
        )
    try:
        lease = pool.lease(job.model)
        engine = lease.__enter__()
    except ModelUnavailable as exc:
        return refuse(400, str(exc))
    except ModelDown as exc:
        return refuse(503, str(exc))
    except KeyError:
        return refuse(404, f"The model '{job.model}' does not exist")
    except InsufficientMemory as exc:
        return refuse(507, str(exc))
    except ModelLoadError as exc:
        return refuse(500, f"The model '{job.model}' cannot be loaded: {exc}")
    except Exception as exc:
        logger.exception("loading %s failed", job.model)
        return refuse(500, f"The model '{job.model}' cannot be loaded: {exc}")
    try:
        model_id = pool.resolve(job.model) or job.model
        folder = pool.folders().get(model_id)
        model_type = folder.config.get("model_type") if folder is not None else None
        _run(job, engine, pool.settings(job.model), publish, refuse, model_id, model_type)
    finally:
        lease.__exit__(None, None, None)


def with_model_settings(job: GenerationJob, settings: dict) -> GenerationJob:
    """``job`` with the model's defaults under the request's own values."""
    from inference.pool.model_settings import SAMPLING_FIELDS

    params = {name: settings[name] for name in SAMPLING_FIELDS if settings.get(name) is not None}
    params.update(job.params)
    kwargs = dict(settings.get("chat_template_kwargs") or {})
    kwargs.update(job.chat_template_kwargs or {})
    return replace(job, params=params, chat_template_kwargs=kwargs)


def _run(
    job: GenerationJob,
    engine,
    settings: dict,
    publish: Publish,
    refuse,
    model_id: str,
    model_type: Optional[str] = None,
) -> None:
    from inference.engine import SamplingParams

    job = with_model_settings(job, settings)
    setting = settings.get("context_length")
    tokenizer = engine.tokenizer
    structured = job.params.get("structured")
    try:
        prompt_text = None
        vision = None  # a prompt with images (inference.vision.prompt.VisionPrompt)
        if job.messages is not None:
            check_images(engine, job.messages, model_id)
            prompt_ids, prompt_text = chat_prompt(tokenizer, job)
            prompts = [prompt_ids]
            if image_urls(job.messages):
                vision = vision_prompt(engine, job.messages, prompt_text)
                prompts = [vision.model_ids]
        else:
            prompts = job.prompts
        # The one check of each prompt (submit takes them as checked), all before submitting any.
        ids = [engine.validate_prompt(p, setting) for p in prompts]
        values = dict(job.params)
        found = (
            capabilities(tokenizer, model_type, settings.get("tool_parser"))
            if job.messages is not None
            else None
        )  # the model's chat format, for every choice
        stops = found.stop_token_ids if found is not None else ()  # Harmony's <|call|> ends the turn
        if stops:
            values["stop_token_ids"] = tuple(values.get("stop_token_ids") or ()) + stops
        limit = engine.context_limit(setting)  # the limit validate_prompt held each prompt to
        if limit is not None:  # prompt + output within it
            longest = max(len(p) for p in ids)
            values["max_tokens"] = min(values.get("max_tokens", SamplingParams.max_tokens), limit - longest)
        base = SamplingParams(**values)  # the one check of the merged values (model settings included)
        check = getattr(engine, "check_speculation", None)  # a draft model asked for and absent
        if check is not None:
            check(base)
        params = [_choice_params(base, i) for i in range(job.n)]
        if structured is not None:
            engine.compile_grammar(structured)  # cached: submit reuses it
    except ValueError as exc:
        return refuse(400, str(exc))
    except TypeError as exc:
        if structured is not None and "structured" in str(exc):
            return refuse(
                400,
                "Structured output (response_format, tool_choice required or named) "
                "is not available in this build",
            )
        return refuse(400, f"The messages cannot be rendered with the model's chat template: {exc}")
    except Exception as exc:  # a chat template that rejects the messages raises anything
        return refuse(400, f"The messages cannot be rendered with the model's chat template: {exc}")
    index = 0
    publish(job.request_id, {"kind": "accepted", "prompt_tokens": [len(p) for p in ids], "model": model_id})
    for prompt, prompt_ids in zip(prompts, ids):
        echoed = None
        if job.echo:
            try:
                entries = (
                    echo.prompt_entries(engine, prompt_ids, base.logprobs)
                    if base.logprobs is not None
                    else None
                )
            except Exception as exc:  # the engine closed meanwhile, or a model that cannot score
                logger.warning("%s: scoring the prompt failed: %s", job.request_id, exc)
                for rest in range(index, len(job.choice_ids())):
                    publish(job.request_id, _failed_delta(rest, f"scoring the prompt failed: {exc}"))
                return
            echoed = (prompt, entries)
        for choice_params in params:
            if echoed is not None:
                publish(job.request_id, echo.echo_delta(index, echoed[0], prompt_ids, tokenizer, echoed[1]))
                if job.echo_only:
                    publish(job.request_id, echo.end_delta(index, len(prompt_ids)))
                    index += 1
                    continue
            parser = _parser(job, found, prompt_text, structured) if found is not None else None
            sink = _sink(job.request_id, index, tokenizer, publish, parser, job.model)
            try:
                if vision is not None:  # queued by its key ids (image content in the block keys)
                    engine.submit(
                        vision.key_ids,
                        choice_params,
                        request_id=f"{job.request_id}-{index}",
                        callback=sink,
                        vision=vision,
                        checked=True,
                        cache_salt=job.cache_salt,
                    )
                else:
                    engine.submit(
                        prompt_ids,
                        choice_params,
                        request_id=f"{job.request_id}-{index}",
                        callback=sink,
                        checked=True,
                        cache_salt=job.cache_salt,
                    )
            except Exception as exc:  # the engine closed meanwhile: end every choice not yet running
                logger.warning("%s: submitting choice %d failed: %s", job.request_id, index, exc)
                for rest in range(index, len(job.choice_ids())):
                    publish(job.request_id, _failed_delta(rest, str(exc)))
                return
            index += 1
    if _was_aborted(job.request_id):  # the abort came while the job was starting
        for choice_id in job.choice_ids():
            engine.abort(choice_id)


def _choice_params(base, index: int):
    """Choice ``index``'s copy of the job's checked SamplingParams: n choices from one seed
    must differ (seed + index); a plain copy, not built and checked again."""
    params = copy.copy(base)
    if base.seed is not None:
        params.seed = base.seed + index
    return params


def check_images(engine, messages: List[dict], model_id: str) -> None:
    """ValueError (400) for images sent to a model that does not read them."""
    if image_urls(messages) and engine.loaded.vision is None:
        raise ValueError(f"The model '{model_id}' does not read images (not a vision-language model)")


def vision_prompt(engine, messages: List[dict], prompt_text: str):
    """The prompt of a chat with images: the images read (data URLs, allowed files and http) and
    run through the model's processor with the rendered text. Every choice of the job shares
    it (and so its image embeddings, computed once on the engine thread)."""
    from inference.vision import images
    from inference.vision.limits import ImageLimits
    from inference.vision.prompt import prepare

    limits = ImageLimits.from_settings()
    pictures = [images.load_image(url, limits) for url in image_urls(messages)]
    return prepare(engine.loaded.vision, prompt_text, pictures)


def _failed_delta(index: int, error: str) -> dict:
    return echo.final_delta(index, "error", usage_dict(None), error)


def usage_dict(usage) -> dict:
    """The ``usage`` of a final delta from the engine's ``Usage`` (None: all zero)."""
    if usage is None:
        return {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
            "hot_cached_tokens": 0,
            "cold_cached_tokens": 0,
        }
    values = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "hot_cached_tokens": usage.hot_cached_tokens,
        "cold_cached_tokens": usage.cold_cached_tokens,
    }
    if usage.timings is not None:  # for /metrics (omlx_request_phase_seconds), not the API bodies
        values["timings"] = usage.timings
    return values


def chat_prompt(tokenizer, job: GenerationJob) -> Tuple[List[int], str]:
    """The prompt of a chat job as the engine receives it: (token ids, text). The template's
    text is encoded without added special tokens, as transformers does for chat templates.
    (POST /v1/messages/count_tokens counts with this too, so its count equals the usage.)"""
    text = _render_chat(tokenizer, job, constrained=job.params.get("structured") is not None)
    return list(tokenizer.encode(text, add_special_tokens=False)), text


def _render_chat(tokenizer, job: GenerationJob, constrained: bool) -> str:
    """The chat prompt. Constrained output (JSON) leaves no room for reasoning: thinking is
    switched off unless the request set enable_thinking itself."""
    kwargs = dict(job.chat_template_kwargs or {})
    if constrained:
        kwargs.setdefault("enable_thinking", False)
    tools = job.tools if job.tool_choice != "none" else None
    return render_prompt(tokenizer, job.messages, tools, kwargs)


def _parser(job: GenerationJob, found, prompt_text: str, structured: Optional[dict]):
    """The parser of one choice's output, by the model's format ``found`` (the job's
    ``inference.chat.capabilities``)."""
    if forces_call(job.tool_choice):
        return ToolChoiceParser()
    if structured is not None:  # JSON by grammar: nothing to parse
        return OutputParser()
    parse_tools = bool(job.tools) and job.tool_choice != "none"
    max_calls = None if job.parallel_tool_calls else 1
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in job.tools or []}
    if found.tool_format is not None and found.tool_format.name == "harmony":  # channels even without tools
        return HarmonyParser(parse_tools, max_calls, schemas)
    return OutputParser(
        found.tool_format if parse_tools else None,
        found.reasoning,
        in_reasoning=prompt_opens_reasoning(prompt_text, found.reasoning),
        max_calls=max_calls,
        schemas=schemas,
    )


def _sink(request_id: str, index: int, tokenizer, publish: Publish, parser=None, model=None):
    def on_event(event) -> None:
        if event.finish_reason in ("abort", "error"):
            logger.info(
                "%s-%d ended: %s %s",
                request_id,
                index,
                event.finish_reason,
                event.error or "",
                extra={"request_id": request_id, "model": model, "finish_reason": event.finish_reason},
            )
        elif event.finish_reason is not None and event.usage is not None:
            logger.info(
                "%s-%d finished: %s",
                request_id,
                index,
                event.finish_reason,
                extra={
                    "request_id": request_id,
                    "model": model,
                    "finish_reason": event.finish_reason,
                    "prompt_tokens": event.usage.prompt_tokens,
                    "completion_tokens": event.usage.completion_tokens,
                    "cached_tokens": event.usage.cached_tokens,
                    "hot_cached_tokens": event.usage.hot_cached_tokens,
                    "cold_cached_tokens": event.usage.cold_cached_tokens,
                },
            )
        usage = usage_dict(event.usage) if event.usage is not None else None
        reason = event.finish_reason
        if parser is None:
            parsed = ParsedDelta(text=event.text)
        else:
            parsed = parser.feed(event.text)
            if reason is not None:
                parsed += parser.finish()
                if reason == "stop" and parser.tool_calls:
                    reason = "tool_calls"
        publish(
            request_id,
            {
                "kind": "delta",
                "index": index,
                "text": parsed.text,
                "reasoning": parsed.reasoning,
                "tool_calls": [call.to_event() for call in parsed.tool_calls],
                "token_ids": list(event.token_ids),
                "logprobs": _logprobs(event.logprobs, tokenizer) if event.logprobs else None,
                "finish_reason": reason,
                "usage": usage,
                "error": event.error,
            },
        )

    return on_event


def _logprobs(logprobs, tokenizer) -> List[dict]:
    def entry(token_id: int, logprob: float) -> dict:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": float(logprob), "bytes": list(text.encode("utf-8"))}

    return [dict(entry(lp.token_id, lp.logprob), top=[entry(t, p) for t, p in lp.top]) for lp in logprobs]
