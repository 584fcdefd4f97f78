"""A synchronous front for scripts, tests and benchmarks: prompts in, finished results out."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

from .engine import Engine, Prompt
from .request import TokenLogprob, Usage
from .sampling_params import SamplingParams


@dataclass
class GenerationResult:
    request_id: str
    prompt: Prompt
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    logprobs: Optional[List[TokenLogprob]] = None
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    usage: Optional[Usage] = None
    time_to_first_token: Optional[float] = None  # seconds from submit to the first token


class LLM:
    """``LLM(model_path, **settings).generate(prompts, SamplingParams(...))``.

    Settings are EngineConfig's fields. All prompts are submitted at once and run batched.
    A context manager; ``close()``, leaving the ``with`` block, collection and interpreter exit
    all close the engine.
    """

    def __init__(self, model_path, **settings):
        self.engine = Engine(model_path, **settings)
        self._close = weakref.finalize(self, self.engine.close)

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Union[Prompt, Sequence[Prompt]],
        params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        cache_salt: Optional[str] = None,
        adapter: Union[None, str, Sequence[Optional[str]]] = None,
    ) -> List[GenerationResult]:
        """``adapter``: the attached LoRA adapter (``Engine.attach_adapter``) every prompt runs
        with, or one per prompt (None: the base model)."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        params = params if params is not None else SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(params)} SamplingParams for {len(prompts)} prompts")
        adapters = [adapter] * len(prompts) if adapter is None or isinstance(adapter, str) else list(adapter)
        if len(adapters) != len(prompts):
            raise ValueError(f"{len(adapters)} adapters for {len(prompts)} prompts")
        start = time.perf_counter()
        streams = [
            self.engine.submit(p, sp, cache_salt=cache_salt, adapter=a)
            for p, sp, a in zip(prompts, params, adapters)
        ]
        results = []
        for prompt, stream in zip(prompts, streams):
            result = GenerationResult(stream.request_id, prompt)
            for event in stream:
                if event.token_ids and result.time_to_first_token is None:
                    result.time_to_first_token = time.perf_counter() - start
                result.text += event.text
                result.token_ids += event.token_ids
                if event.logprobs:
                    result.logprobs = (result.logprobs or []) + event.logprobs
                result.finish_reason = event.finish_reason
                result.error = event.error
                result.usage = event.usage
            results.append(result)
        return results

    def close(self) -> None:
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
