"""Per-request sampling parameters, validated once when the request is made."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

from .grammar import check_structured


@dataclass
class SamplingParams:
    """How to pick each next token of one request, and when to stop.

    ``temperature == 0`` is greedy decoding. Penalties follow the usual conventions:
    ``repetition_penalty`` (HF/CTRL style, over prompt and output, 1.0 = off) and OpenAI's
    ``presence_penalty`` / ``frequency_penalty`` (over the output so far, 0.0 = off).
    ``logprobs=N`` returns the sampled token's log-probability and the N most likely
    alternatives at each step (``0`` = only the sampled one; ``None`` = none).
    ``seed`` makes sampling reproducible whatever else runs in the same batch.
    ``structured`` constrains the output to JSON while it is sampled: ``{"type": "json_object"}``
    (any JSON object) or ``{"type": "json_schema", "schema": {...}}`` (a JSON Schema); the
    output then ends ("stop") when the JSON is complete. See docs/engine.md.
    ``speculative`` ("off", "lookup", "suffix" or "draft") and ``num_draft_tokens`` (0 to 16)
    override the model's speculative decoding settings for this request (None: the model's);
    see docs/engine.md.
    ``priority`` says how urgently the request is scheduled, not how it samples: lower is more
    urgent (as in vLLM); 0 is the default, interactive work; background work uses larger values.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: Optional[int] = None
    stop: Union[str, Sequence[str], None] = None
    stop_token_ids: Sequence[int] = field(default_factory=tuple)
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    include_stop_str_in_output: bool = False
    structured: Optional[dict] = None
    priority: int = 0
    speculative: Optional[str] = None
    num_draft_tokens: Optional[int] = None

    MAX_LOGPROBS = 20
    SPECULATIVE = ("off", "lookup", "suffix", "draft")  # inference.engine.speculative.METHODS
    MAX_DRAFT_TOKENS = 16

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = (self.stop,)
        self.stop = tuple(self.stop or ())
        self.stop_token_ids = tuple(self.stop_token_ids or ())
        self._check()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def _check(self):
        def bad(name, why):
            raise ValueError(f"{name}={getattr(self, name)!r}: {why}")

        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            bad("max_tokens", "must be an integer >= 1")
        if not _is_number(self.temperature) or self.temperature < 0:
            bad("temperature", "must be a number >= 0 (0 means greedy)")
        if not _is_int(self.top_k) or self.top_k < 0:
            bad("top_k", "must be an integer >= 0 (0 disables top-k)")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            bad("top_p", "must be in (0, 1]")
        if not _is_number(self.min_p) or not 0 <= self.min_p <= 1:
            bad("min_p", "must be in [0, 1]")
        if not _is_number(self.repetition_penalty) or self.repetition_penalty <= 0:
            bad("repetition_penalty", "must be a number > 0 (1.0 disables it)")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not -2 <= value <= 2:
                bad(name, "must be in [-2, 2]")
        if self.seed is not None and not _is_int(self.seed):
            bad("seed", "must be an integer or None")
        if not all(isinstance(s, str) for s in self.stop):
            bad("stop", "must be a string or a list of strings")
        if any(s == "" for s in self.stop):
            bad("stop", "stop strings must not be empty")
        if not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "must be a list of non-negative integers")
        if self.logprobs is not None and (
            not _is_int(self.logprobs) or not 0 <= self.logprobs <= self.MAX_LOGPROBS
        ):
            bad("logprobs", f"must be None or an integer in [0, {self.MAX_LOGPROBS}]")
        if not isinstance(self.ignore_eos, bool):
            bad("ignore_eos", "must be true or false")
        if not _is_int(self.priority) or not -1000 <= self.priority <= 1000:
            bad("priority", "must be an integer in [-1000, 1000] (lower is more urgent)")
        if self.speculative is not None and self.speculative not in self.SPECULATIVE:
            bad("speculative", f"must be one of {', '.join(self.SPECULATIVE)}")
        if self.num_draft_tokens is not None and (
            not _is_int(self.num_draft_tokens) or not 0 <= self.num_draft_tokens <= self.MAX_DRAFT_TOKENS
        ):
            bad("num_draft_tokens", f"must be an integer in [0, {self.MAX_DRAFT_TOKENS}]")
        check_structured(self.structured)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    """A finite int or float: NaN, infinity (JSON's 1e400) and ints beyond float are not numbers
    a sampler can divide by."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an int too large for a float
        return False
