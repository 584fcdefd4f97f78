"""A request's life inside the engine, and the events it streams back."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

from .sampling_params import SamplingParams
from .text_stream import TextStream

if TYPE_CHECKING:
    from .grammar import Grammar, GrammarMatcher

_arrivals = itertools.count()


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, or preempted and waiting to be recomputed
    PREFILLING = "prefilling"  # its own KV cache is being filled chunk by chunk
    DECODING = "decoding"  # a row of the decode batch
    FINISHED = "finished"


@dataclass
class Usage:
    """Token counts of one request; prompt tokens split by where their KV came from."""

    prompt_tokens: int
    completion_tokens: int
    hot_cached_tokens: int = 0  # KV from the hot tier (RAM)
    cold_cached_tokens: int = 0  # KV from the cold tier (SSD)
    # Where the request's time went, in seconds (``Request.timings``); None before it finished.
    timings: Optional[dict] = None

    @property
    def cached_tokens(self) -> int:
        return self.hot_cached_tokens + self.cold_cached_tokens

    @property
    def computed_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: List[Tuple[int, float]] = field(default_factory=list)  # most likely first


@dataclass
class RequestOutput:
    """One event of a request's stream: what is new since the previous event.

    The last event of every request has ``finish_reason`` set ("stop", "length", "abort" or
    "error") and carries ``usage``; ``error`` says what went wrong when the reason is "error".
    """

    request_id: str
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    logprobs: Optional[List[TokenLogprob]] = None
    finish_reason: Optional[str] = None
    usage: Optional[Usage] = None
    error: Optional[str] = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class Request:
    """Engine-side state of one request (only the engine thread touches it).

    Invariant: the KV of ``all_token_ids[:num_computed]`` is in ``cache`` while prefilling;
    a decoding request has the KV of all but its last token in the decode batch, and that
    last token is its next input. A prefill computes every token, the last one too: the
    next token is sampled from the logits of the last (``ModelRunner.first_tokens``).
    Preemption drops the KV and keeps the tokens, so recomputing it is a prefill of
    ``all_token_ids`` like any new request.

    A request with structured output carries its compiled ``grammar`` (shared, immutable) and,
    while it decodes, a ``matcher``: the grammar advanced by every output token that reached
    the host. The matcher is rebuilt from the output tokens each time the request joins the
    decode batch, so preemption needs nothing else.

    Every prefix-cache lookup and store of a request passes its ``cache_salt``.
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: List[int],
        params: SamplingParams,
        text_stream: TextStream,
        eos_token_ids: frozenset,
        sink: Callable[[RequestOutput], Any],
        seed: int,
        grammar: Optional["Grammar"] = None,
        cache_salt: Optional[str] = None,
    ):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.params = params
        self.text_stream = text_stream
        self.sink = sink
        self.seed = seed
        self.arrival = next(_arrivals)
        self.queued_at: Optional[float] = None  # scheduler clock and step when first queued
        self.queued_step = 0
        self.stop_token_ids = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos and grammar is None else eos_token_ids
        )  # a grammar allows EOS only where the output may end
        self.output_token_ids: List[int] = []
        self.status = RequestStatus.WAITING
        self.num_computed = 0
        self.cached_hot_tokens = 0
        self.cached_cold_tokens = 0
        self.num_preemptions = 0
        self.cache: Optional[list] = None
        # Caches of sliding-window and recurrent layers taken at block boundaries while it
        # decodes (model_runner.DecodeBatch), for the block cache when it ends.
        self.snapshots: list = []
        self.grammar = grammar
        self.matcher: Optional["GrammarMatcher"] = None
        # Its drafter and draft statistics while speculative decoding is on for it
        # (inference.engine.speculative.policy.RowSpeculation); None until it drafts.
        self.speculation = None
        # A prompt with images (inference.vision.prompt.VisionPrompt): prompt_token_ids are then
        # its key ids, which the model never sees; None for text.
        self.vision = None
        # Its prefix-cache namespace (cache.block_key.salted_root): it shares blocks only with
        # requests of the same salt; None shares the unsalted cache.
        self.cache_salt = cache_salt
        # The LoRA adapter it runs with (inference.engine.lora.Adapter; its digest is in the
        # cache salt already); None: the base model.
        self.adapter = None
        # Where its time goes (seconds, ``time.perf_counter``): see ``timings``.
        self.created = time.perf_counter()
        self.admitted_at: Optional[float] = None  # first admission
        self.first_token_at: Optional[float] = None
        self.restore_seconds = 0.0  # loading cached prefixes into its caches
        self.prefill_seconds = 0.0  # prefill forward passes it took part in (shared ones whole)

    @property
    def all_token_ids(self) -> List[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def adapter_slot(self) -> int:
        """Its adapter's slot in a batch's per-row adapter ids; 0 for the base model."""
        return self.adapter.slot if self.adapter is not None else 0

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def length_left(self, context_length: Optional[int]) -> int:
        """Tokens it may still generate before it ends by length (max_tokens, or the model's
        context when ``context_length`` is given)."""
        left = self.params.max_tokens - len(self.output_token_ids)
        if context_length:
            left = min(left, context_length - self.num_tokens)
        return left

    @property
    def num_to_prefill(self) -> int:
        """Tokens still to run through the model before this request's next token is sampled."""
        return self.num_tokens - self.num_computed

    def timings(self, now: float) -> dict:
        """Seconds from submission to ``now``, by phase: ``queue`` (waiting for admission,
        batch wait included), ``restore`` (cached KV into its caches), ``prefill`` (forward
        passes over its prompt, a batched one counted whole), ``prefill_wait`` (admitted, before
        its first token, while the engine ran other work: other prompts' chunks, decode steps,
        a recomputation after preemption), ``decode`` (first token to ``now``). They add up to
        the total; TTFT = queue + restore + prefill + prefill_wait."""
        admitted = self.admitted_at if self.admitted_at is not None else now
        first = self.first_token_at if self.first_token_at is not None else now
        queue = admitted - self.created
        wait = max(0.0, first - admitted - self.restore_seconds - self.prefill_seconds)
        return {
            "queue": queue,
            "restore": self.restore_seconds,
            "prefill": self.prefill_seconds,
            "prefill_wait": wait,
            "decode": now - first,
        }

    def usage(self, now: Optional[float] = None) -> Usage:
        """Token counts; with ``now`` (when it finishes) also the timings."""
        return Usage(
            len(self.prompt_token_ids),
            len(self.output_token_ids),
            self.cached_hot_tokens,
            self.cached_cold_tokens,
            self.timings(now) if now is not None else None,
        )

    def __repr__(self):
        return f"Request({self.request_id}, {self.status.value}, {self.num_tokens} tokens)"
