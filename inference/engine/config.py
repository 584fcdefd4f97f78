"""The engine's settings: one typed object, built and checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from cache.sizes import parse_size

from .kv_quant import BITS, KVQuant


@dataclass(frozen=True)
class EngineConfig:
    """Settings of one engine (one loaded model).

    max_concurrent_requests: requests prefilling or decoding at once (upstream oMLX's
        ``--max-concurrent-requests``); the rest wait in arrival order.
    step_token_budget: tokens one engine step may process: every running decode takes one,
        waiting prefills share what is left, so a long prompt never stalls running streams.
    prefill_chunk_size: the most prompt tokens of one request processed in one step.
    max_kv_tokens: KV cache capacity in token slots across all requests; when it runs out
        the newest request is preempted and recomputed later. None: derived from
        ``kv_cache_memory_fraction`` of system RAM.
    kv_cache_memory_fraction: share of RAM the KV cache may use when max_kv_tokens is None.
    dtype: "float32", "bfloat16" or "float16" to cast the weights to; None picks the fastest
        correct one for the device (float32 on CPUs, the model's own dtype on GPUs).
    prefix_cache: reuse the KV of cached prompt prefixes (the block cache).
    cache_block_size: tokens per KV block.
    share_inflight_prefixes: a request whose prompt shares at least one whole block (beyond
        what the cache holds) with an older request still prefilling waits for that prefill and
        then reuses its KV, instead of computing the same prefix at the same time; prefills
        store their whole blocks after every chunk so such requests start early. Needs
        prefix_cache.
    hot_cache_max_size: bytes of KV blocks kept in RAM: an int, "4GiB", or "10%" of RAM.
    paged_ssd_cache_dir: directory of the cold tier (blocks on disk, kept across restarts);
        None keeps blocks in RAM only.
    max_batch_wait_ms: how long a new request may be held so that it joins a batch with others
        (admitted earlier when the waiting requests fill every free slot); 0 admits at once.
    max_step_ms: while requests decode, a step computes only as many prompt tokens as keep it
        near this many milliseconds, from the measured speeds (``step_costs.StepCosts``), so
        running streams keep a steady inter-token latency while long prompts are prefilled.
        Lower: steadier streams, slower first tokens. 0 (the default): default-priority prompts
        are computed whole, one long prompt a step with a decode step between two
        (``Scheduler._apart``); a background one targets 4 decode steps.
    kv_bits: quantize the KV of attention layers (full and sliding) to 8 or 4 bits (inference.engine.
        quantized_kv): about 1.9x or 3.6x the tokens per byte of float16 KV, in RAM and on SSD,
        for a small loss of quality (docs/benchmarks.md); None (the default): the model's dtype.
        Part of the KV format, so blocks of either never serve the other.
    kv_group_size: channels per scale and bias of quantized KV: 32, 64 or 128 (must divide the
        head dimension); also the group size of ``paged_ssd_cache_bits``.
    paged_ssd_cache_bits: a float model's SSD tier keeps its blocks quantized to 8 or 4 bits
        (cache/cold_quant.py), dequantized when read back: close to the float KV, not equal;
        None (the default): the SSD tier holds the KV as computed. Without effect when
        ``kv_bits`` is set (the blocks are quantized already) or the SSD tier is off.
    speculative: speculative decoding for this model's requests: "off" (the default),
        "lookup" (prompt lookup: drafts copied from the request's own prompt and output),
        "suffix" (lookup, and drafts from the model's earlier answers of the request's cache
        salt; inference.engine.speculative) or "draft" (a draft model's greedy tokens: the
        engine's ``attach_draft``; the model pool attaches the model's ``draft_model``). A request
        may override it.
    num_draft_tokens: the most tokens a row drafts per step when speculating (1 to 16); the
        adaptive rule drafts fewer while drafts are rejected.
    step_trace: keep a record of each of the last this many steps (``step_trace.StepRecord``:
        rows, prompt tokens, passes and where the step's time went; ``Engine.step_trace()``);
        0 (the default) keeps none.

    ``LIVE`` names the settings an engine takes while running (``Engine.tune``).
    """

    max_concurrent_requests: int = 16
    step_token_budget: int = 2048
    prefill_chunk_size: int = 512
    max_kv_tokens: Optional[int] = None
    kv_cache_memory_fraction: float = 0.25
    dtype: Optional[str] = None
    prefix_cache: bool = True
    cache_block_size: int = 256
    share_inflight_prefixes: bool = True
    hot_cache_max_size: Union[int, str] = "10%"
    paged_ssd_cache_dir: Optional[str] = None
    max_batch_wait_ms: float = 0.0
    max_step_ms: float = 0.0
    step_trace: int = 0
    kv_bits: Optional[int] = None
    kv_group_size: int = 64
    paged_ssd_cache_bits: Optional[int] = None
    speculative: str = "off"
    num_draft_tokens: int = 4

    LIVE = ("max_batch_wait_ms", "max_step_ms", "speculative", "num_draft_tokens")
    SPECULATIVE = ("off", "lookup", "suffix", "draft")
    MAX_DRAFT_TOKENS = 16
    DTYPES = ("float32", "bfloat16", "float16")
    MAX_STEP_TRACE = 100_000  # records of about 300 bytes each

    def __post_init__(self):
        def positive_int(name):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an integer >= 1")

        for name in (
            "max_concurrent_requests",
            "step_token_budget",
            "prefill_chunk_size",
            "cache_block_size",
        ):
            positive_int(name)
        if self.max_kv_tokens is not None:
            positive_int("max_kv_tokens")
        if self.step_token_budget < self.max_concurrent_requests:
            raise ValueError(
                f"step_token_budget={self.step_token_budget} must be >= "
                f"max_concurrent_requests={self.max_concurrent_requests}: every running "
                "request decodes one token per step"
            )
        if not 0 < self.kv_cache_memory_fraction <= 0.9:
            raise ValueError(
                f"kv_cache_memory_fraction={self.kv_cache_memory_fraction!r}: must be in (0, 0.9]"
            )
        parse_size(self.hot_cache_max_size, "hot_cache_max_size")
        wait = self.max_batch_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 60_000:
            raise ValueError(f"max_batch_wait_ms={wait!r}: must be a number of milliseconds in [0, 60000]")
        step = self.max_step_ms
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 <= step <= 600_000:
            raise ValueError(f"max_step_ms={step!r}: must be a number of milliseconds in [0, 600000]")
        trace = self.step_trace
        if not isinstance(trace, int) or isinstance(trace, bool) or not 0 <= trace <= self.MAX_STEP_TRACE:
            raise ValueError(f"step_trace={trace!r}: must be a number of steps in [0, {self.MAX_STEP_TRACE}]")
        self.kv_quant  # ValueError for bad kv_bits / kv_group_size
        if self.paged_ssd_cache_bits is not None:
            bits = self.paged_ssd_cache_bits
            if isinstance(bits, bool) or not isinstance(bits, int):
                raise ValueError(f"paged_ssd_cache_bits={bits!r}: must be an integer")
            if bits not in BITS:
                raise ValueError(
                    f"paged_ssd_cache_bits={bits!r}: must be one of {', '.join(map(str, BITS))} or null"
                )
        if self.speculative not in self.SPECULATIVE:
            raise ValueError(
                f"speculative={self.speculative!r}: must be one of {', '.join(self.SPECULATIVE)}"
            )
        k = self.num_draft_tokens
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= self.MAX_DRAFT_TOKENS:
            raise ValueError(f"num_draft_tokens={k!r}: must be an integer in [1, {self.MAX_DRAFT_TOKENS}]")
        if self.dtype is not None and self.dtype not in self.DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: must be one of {', '.join(self.DTYPES)} or None")

    @property
    def kv_quant(self):
        """The attention layers' KV format (``quantized_kv.KVQuant``), None for the model's dtype."""

        for name in ("kv_bits", "kv_group_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name}={value!r}: must be an integer")
        return KVQuant(self.kv_bits, self.kv_group_size) if self.kv_bits is not None else None
