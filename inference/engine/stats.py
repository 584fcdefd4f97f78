"""What an engine reports to the rest of the process: ``Engine.stats()`` (and
``EncoderEngine.stats()``) returns an ``EngineStats``, plain data that /metrics, the memory guard,
GET /v1/cache/status and the console read instead of the engine's scheduler, runner and caches.

Read from any thread without stopping the engine: each figure is read once, as those readers
always did, so the figures of one ``EngineStats`` may be a step apart (a hint, not a count).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class EngineStats:
    """One engine's figures at one instant.

    ``active >= prefilling + decoding``: the requests submitted and not finished include those
    still in the inbox or waiting for admission. ``cache`` is the block cache's ``snapshot()``
    (sections "lookups", "hot", "cold", "hit_rate", "speeds"), empty when caching is off for the
    model (or the read met the engine thread changing it: that read's figures are skipped).
    """

    active: int = 0  # requests submitted and not finished (queued, waiting or running)
    prefilling: int = 0  # requests the scheduler runs whose prompt is not computed yet
    decoding: int = 0  # requests the scheduler runs that generate tokens
    decode_rows: int = 0  # rows of the decode batch
    kv_tokens: int = 0  # KV token slots the running requests take after one more step
    shedding: bool = False  # a preemption for memory waits for the next step
    cache: dict = field(default_factory=dict)
    fingerprint: Optional[str] = None  # hex of the model fingerprint; None: caching off
    block_size: Optional[int] = None  # tokens per KV block; None: caching off
    hot_capacity_bytes: Optional[int] = None  # the hot tier's budget; None: caching off
    cold_dir: Optional[str] = None  # the cold tier's directory; None: no cold tier or it is off
    held_blocks: Optional[int] = None  # hot blocks referenced by a request (asked for: a walk)
    # The KV format of attention layers: "float" or "q<bits>g<group>" (kv_bits); None until loaded.
    kv_format: Optional[str] = None
    # Speculative decoding totals (SpeculativeCounters.snapshot): drafted_tokens,
    # accepted_tokens, verify_passes, emitted_tokens; empty before the model is loaded.
    speculative: dict = field(default_factory=dict)
    # What one row of a decode step costs, in prompt tokens: a measured prompt token's compute
    # (StepCosts.token_seconds) x the measured prefill rate; None until both are measured. The
    # router of Redis mode weighs a worker's queued decode with it (inference/dispatch/router.py).
    decode_row_tokens: Optional[float] = None

    @property
    def running(self) -> int:
        return self.prefilling + self.decoding

    @property
    def waiting(self) -> int:
        """Requests not running yet, those not in the scheduler yet included."""
        return max(0, self.active - self.running)

    @property
    def hot_bytes(self) -> int:
        return (self.cache.get("hot") or {}).get("bytes", 0)


def read_stats(engine, held_blocks: bool = False) -> EngineStats:
    """``Engine.stats``: the figures of ``engine`` now, read from any thread."""
    scheduler = getattr(engine, "scheduler", None)  # None until loaded
    runner = getattr(engine, "runner", None)  # None once closed
    cache = engine.prefix_cache
    try:
        snapshot = cache.snapshot()
    except Exception:  # read while the engine thread changes it: skip these figures
        snapshot = {}
    out = EngineStats(active=engine.num_active(), cache=snapshot)
    if scheduler is not None:
        running = scheduler.running
        out.prefilling, out.decoding = len(scheduler.prefilling), len(scheduler.decoding)
        out.kv_tokens, out.shedding = scheduler.kv_demand(running), scheduler.shedding
        costs = scheduler.costs
        if costs.token_seconds and costs.prefill_rate:
            out.decode_row_tokens = costs.token_seconds * costs.prefill_rate
    if runner is not None:
        out.decode_rows, out.speculative = len(runner.batch), runner.batch.counters.snapshot()
    loaded = getattr(engine, "loaded", None)
    if loaded is not None:
        out.kv_format = loaded.kv_quant.tag if loaded.kv_quant is not None else "float"
    hot = getattr(cache, "hot", None)
    if hot is not None:  # a block cache (prefix caching on)
        out.fingerprint, out.hot_capacity_bytes = cache.fingerprint.hex, hot.capacity_bytes
        out.block_size = cache.block_size
        cold = cache.cold
        if cold is not None and cold.enabled:
            out.cold_dir = str(cold.dir)
        if held_blocks:
            out.held_blocks = sum(1 for block in hot.blocks() if block.ref_count > 0)
    return out
