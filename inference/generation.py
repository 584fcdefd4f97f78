"""The worker side of an API request: a ``GenerationJob`` handed to a model's engine, its events
published to the request's channel-layer group (``inference.relay``).

The Huey task (``inference.tasks``) and the direct hand-off of the view share all of this; only
how a job reaches ``run_job`` differs.

Events (plain dicts, the same over any channel layer):
    {"kind": "accepted"}                      the engine took every choice of the job
    {"kind": "error", "status", "message"}    the job was refused (nothing else follows)
    {"kind": "delta", "index", "text", "token_ids", "logprobs", "finish_reason", "usage", "error"}
        new output of choice ``index``; the last delta of a choice has ``finish_reason`` and
        ``usage`` ({"prompt_tokens", "completion_tokens", "cached_tokens"}).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Union

from inference import relay

logger = logging.getLogger("omlx.api")

Publish = Callable[[str, dict], None]
ABORT_MEMORY_SECONDS = 600.0


@dataclass
class GenerationJob:
    """What the view asks of a worker. ``messages`` for chat, else ``prompts`` (strings or token
    id lists); every prompt gets ``n`` choices, numbered prompt by prompt."""

    request_id: str
    model: str
    params: dict  # SamplingParams fields, already validated by the view
    n: int = 1
    messages: Optional[List[dict]] = None
    prompts: List[Union[str, List[int]]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def choice_ids(self) -> List[str]:
        count = self.n * (1 if self.messages is not None else len(self.prompts))
        return [f"{self.request_id}-{i}" for i in range(count)]


_aborted: Dict[str, float] = {}  # request ids aborted before their job ran -> when
_aborted_lock = threading.Lock()


def abort_job(request_id: str, model: str, count: int) -> None:
    """Abort every choice of a request, whether its job ran already or not."""
    from inference.model_registry import get_registry

    now = time.monotonic()
    with _aborted_lock:
        for key, when in list(_aborted.items()):
            if now - when > ABORT_MEMORY_SECONDS:
                del _aborted[key]
        _aborted[request_id] = now
    engine = get_registry().loaded(model)
    if engine is not None:
        for i in range(count):
            engine.abort(f"{request_id}-{i}")


def _was_aborted(request_id: str) -> bool:
    with _aborted_lock:
        return _aborted.pop(request_id, None) is not None


def run_job(job: GenerationJob, publish: Publish = relay.publish) -> None:
    """Hand ``job`` to its model's engine; every outcome is published, nothing is raised."""
    from inference.engine import ModelLoadError, SamplingParams
    from inference.model_registry import get_registry

    def refuse(status: int, message: str) -> None:
        publish(job.request_id, {"kind": "error", "status": status, "message": message})

    if _was_aborted(job.request_id):
        return
    try:
        engine = get_registry().engine(job.model)
    except KeyError:
        return refuse(404, f"The model '{job.model}' does not exist")
    except ModelLoadError as exc:
        return refuse(500, f"The model '{job.model}' cannot be loaded: {exc}")
    except Exception as exc:
        logger.exception("loading %s failed", job.model)
        return refuse(500, f"The model '{job.model}' cannot be loaded: {exc}")
    try:
        prompts = [_render_chat(engine, job.messages)] if job.messages is not None else job.prompts
        params = []
        for i in range(job.n):
            values = dict(job.params)
            if values.get("seed") is not None:
                values["seed"] += i  # n choices from one seed must differ
            params.append(SamplingParams(**values))
        ids = [engine.validate_prompt(p) for p in prompts]  # validates all before submitting any
    except ValueError as exc:
        return refuse(400, str(exc))
    except Exception as exc:  # a chat template that rejects the messages raises anything
        return refuse(400, f"The messages cannot be rendered with the model's chat template: {exc}")
    tokenizer = engine.tokenizer
    index = 0
    publish(job.request_id, {"kind": "accepted"})
    for prompt_ids in ids:
        for choice_params in params:
            sink = _sink(job.request_id, index, tokenizer, publish)
            engine.submit(prompt_ids, choice_params, request_id=f"{job.request_id}-{index}", callback=sink)
            index += 1
    if _was_aborted(job.request_id):  # the abort came while the job was starting
        for choice_id in job.choice_ids():
            engine.abort(choice_id)


def _render_chat(engine, messages: List[dict]) -> List[int]:
    rendered = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    if hasattr(rendered, "keys") and "input_ids" in rendered:  # BatchEncoding
        rendered = rendered["input_ids"]
    return list(rendered)


def _sink(request_id: str, index: int, tokenizer, publish: Publish):
    def on_event(event) -> None:
        if event.finish_reason in ("abort", "error"):
            logger.info("%s-%d ended: %s %s", request_id, index, event.finish_reason, event.error or "")
        usage = None
        if event.usage is not None:
            usage = {"prompt_tokens": event.usage.prompt_tokens,
                     "completion_tokens": event.usage.completion_tokens,
                     "cached_tokens": event.usage.cached_tokens}
        publish(request_id, {
            "kind": "delta", "index": index, "text": event.text, "token_ids": list(event.token_ids),
            "logprobs": _logprobs(event.logprobs, tokenizer) if event.logprobs else None,
            "finish_reason": event.finish_reason, "usage": usage, "error": event.error,
        })

    return on_event


def _logprobs(logprobs, tokenizer) -> List[dict]:
    def entry(token_id: int, logprob: float) -> dict:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": float(logprob), "bytes": list(text.encode("utf-8"))}

    return [dict(entry(lp.token_id, lp.logprob), top=[entry(t, p) for t, p in lp.top]) for lp in logprobs]
