"""The series of /metrics read at scrape time (``EngineCollector``) and the console's figures
(``totals``, which admin_panel/history.py samples), from the loaded engines of this process.

An engine's cache counters vanish with the engine, so when a model is unloaded its final counts
join a retained total: the counters stay monotonic across unloads and reloads. In Redis mode
without worker threads in the server, the server has no engines, and these series are absent.

The direction of the imports: the pool and the engines publish into this module
(``model_loaded``, ``model_unloaded``, ``encoder_batch``), and what it reads of the rest of the
process (the pool, the API's admission counts, the memory guard) is handed to it once at start
(``connect``, from inference/apps.py). It imports none of them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .definitions import (
    ENCODER_BATCHES,
    ENCODER_SEQUENCES,
    GENERATION_TOKENS,
    GENERATIONS,
    HTTP_REQUESTS,
    MODEL_LOAD_FAILURES,
    MODEL_LOAD_SECONDS,
    MODEL_LOADS,
    MODEL_UNLOADS,
    PROMPT_TOKENS,
    REGISTRY,
)


@dataclass
class Sources:
    """What the collector reads of the rest of the process; each a function called at read time.
    Until ``connect`` is called (outside Django): no pool, no guard, nothing in flight."""

    pool: Callable[[], object] = lambda: None  # the process's pool (built on first use)
    in_flight: Callable[[], Dict[str, int]] = dict  # model -> choices the API admitted, not finished
    guard: Callable[[], object] = lambda: None  # the memory guard while it runs, else None
    serves_models: Callable[[], bool] = lambda: False  # whether this process runs inference
    process_rss: Callable[[], Optional[int]] = lambda: None  # resident memory of this process
    workers: Callable[[], dict] = dict  # Redis mode: live worker id -> its WorkerSummary or None


_sources = Sources()


def connect(**sources: Callable) -> None:
    """Hand the collector what it reads (the fields of ``Sources``); called once at start."""
    global _sources
    _sources = Sources(**sources)


# Counters of the block cache (cache/block_cache.py snapshot()): (metric, help, section, field).
_CACHE_COUNTERS = (
    ("lookups", "Prefix lookups", "lookups", "lookups"),
    ("lookup_tokens", "Prompt tokens looked up in the prefix cache", "lookups", "lookup_tokens"),
    ("hot_hit_tokens", None, "lookups", "hot_hit_tokens"),
    ("cold_hit_tokens", None, "lookups", "cold_hit_tokens"),
    ("stored_blocks", "KV blocks stored in the cache", "lookups", "stored_blocks"),
    ("recomputed_instead", None, "lookups", "recomputed_instead"),
    ("hot_evictions", None, "hot", "evictions"),
    ("hot_evicted_bytes", None, "hot", "evicted_bytes"),
    ("cold_writes", None, "cold", "writes"),
    ("cold_reads", None, "cold", "reads"),
    ("cold_write_errors", None, "cold", "write_errors"),
    ("cold_evictions", None, "cold", "gc_removed"),
)

_lock = threading.Lock()
_live: Dict[int, Tuple[str, object]] = {}  # id(engine) -> (model id, engine)
_retained: Dict[str, Dict[str, int]] = {}  # model id -> cache counters of its unloaded engines
_seen_models: set = set()  # models with API requests in flight at some point (gauges stay at 0 after)


def model_loaded(model_id: str, engine, seconds: float) -> None:
    MODEL_LOADS.labels(model_id).inc()
    MODEL_LOAD_SECONDS.labels(model_id).observe(seconds)
    with _lock:
        _live[id(engine)] = (model_id, engine)


def encoder_batch(model_id: str, sequences: int) -> None:
    ENCODER_BATCHES.labels(model_id).inc()
    ENCODER_SEQUENCES.labels(model_id).inc(sequences)


def model_load_failed(model_id: str) -> None:
    MODEL_LOAD_FAILURES.labels(model_id).inc()


def model_unloaded(model_id: str, engine, reason: str) -> None:
    """After the engine is closed: its cache counters are final; they move to the retained total
    in the same step that takes the engine out of the live set (no scrape sees them dip)."""
    MODEL_UNLOADS.labels(model_id, reason).inc()
    counts = _cache_counts(engine)
    with _lock:
        _live.pop(id(engine), None)
        kept = _retained.setdefault(model_id, {})
        for name, value in counts.items():
            kept[name] = kept.get(name, 0) + value


def _cache_counts(engine) -> Dict[str, int]:
    snapshot = engine.stats().cache
    out = {}
    for name, _, section, key in _CACHE_COUNTERS:
        values = snapshot.get(section)
        if values is not None:
            out[name] = int(values.get(key, 0))
    return out


@dataclass
class Totals:
    """This process's figures at one instant, for the Status page's sampler: cumulative counters
    (totals since start) and current gauges."""

    at: float  # time.time()
    http_requests: int = 0
    generations: int = 0  # choices finished (any reason)
    generated_tokens: int = 0
    prompt_tokens: int = 0
    lookup_tokens: int = 0
    hot_hit_tokens: int = 0
    cold_hit_tokens: int = 0
    running: int = 0
    waiting: int = 0
    api_in_flight: int = 0
    models: Dict[str, dict] = field(default_factory=dict)  # loaded model id -> {"memory_bytes", ...}
    model_memory_used: Optional[int] = None
    model_memory_limit: Optional[int] = None
    process_memory: Optional[int] = None
    process_memory_limit: Optional[int] = None
    serves_models: bool = True


def worker_summaries() -> dict:
    """Redis mode: live worker id -> its WorkerSummary (inference/dispatch/worker_summary.py); {}
    otherwise, or when Redis cannot be read."""
    try:
        return _sources.workers()
    except Exception:
        return {}


def _sum(counter, name: str = "_total") -> float:
    return sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith(name))


def totals(pool=None) -> Totals:
    """The figures of this process now (``pool`` defaults to the process's pool)."""
    out = Totals(
        at=time.time(),
        http_requests=int(_sum(HTTP_REQUESTS)),
        generations=int(_sum(GENERATIONS)),
        generated_tokens=int(_sum(GENERATION_TOKENS)),
        prompt_tokens=int(_sum(PROMPT_TOKENS)),
        api_in_flight=sum(_sources.in_flight().values()),
        serves_models=_sources.serves_models(),
        process_memory=_sources.process_rss(),
    )
    cache = _cache_totals()
    out.lookup_tokens = cache.get("lookup_tokens", 0)
    out.hot_hit_tokens = cache.get("hot_hit_tokens", 0)
    out.cold_hit_tokens = cache.get("cold_hit_tokens", 0)
    if pool is None and out.serves_models:
        pool = _sources.pool()
    if pool is not None:
        for model_id, info in pool.loaded_models().items():
            stats = info["engine"].stats()
            running, waiting = stats.running, stats.waiting
            out.running += running
            out.waiting += waiting
            out.models[model_id] = {
                "memory_bytes": info["memory_bytes"],
                "running": running,
                "waiting": waiting,
                "loaded_at": info["loaded_at"],
                "speculative": stats.speculative,
            }
        out.model_memory_used = pool.used_bytes()
        out.model_memory_limit = pool.max_model_memory
        out.process_memory_limit = pool.max_process_memory
    return out


def _cache_totals() -> Dict[str, int]:
    """Cache counters summed over every model, live engines and unloaded ones."""
    out: Dict[str, int] = {}
    for counts in _cache_counts_by_model().values():
        for name, value in counts.items():
            out[name] = out.get(name, 0) + value
    return out


def _cache_counts_by_model() -> Dict[str, Dict[str, int]]:
    with _lock:
        live = list(_live.values())
        out = {model_id: dict(counts) for model_id, counts in _retained.items()}
        # Read under the lock, so an unload cannot move counts between the two reads.
        for model_id, engine in live:
            kept = out.setdefault(model_id, {})
            for name, value in _cache_counts(engine).items():
                kept[name] = kept.get(name, 0) + value
    return out


# Speculative decoding's totals per loaded model (EngineStats.speculative), reset on reload.
SPECULATIVE_SERIES = {
    "drafted_tokens": "Tokens drafted for speculative decoding and checked by the model",
    "accepted_tokens": "Drafted tokens the model accepted",
    "verify_passes": "Forward passes that checked drafts",
    "emitted_tokens": "Tokens those passes produced (accepted drafts and one more per row)",
}


class EngineCollector:
    """Series read at scrape time: memory, queue depth and the block cache per model."""

    def describe(self) -> Iterable:
        return []  # series depend on what is loaded

    def collect(self) -> Iterable:
        in_flight = _sources.in_flight()
        with _lock:
            _seen_models.update(in_flight)
            seen = sorted(_seen_models)
        jobs = GaugeMetricFamily(
            "omlx_api_requests_in_flight",
            "Choices of API requests this server "
            "admitted and has not finished (running or queued, any worker)",
            labels=["model"],
        )
        for model_id in seen:
            jobs.add_metric([model_id], in_flight.get(model_id, 0))
        yield jobs
        if not _sources.serves_models():
            return
        yield from self._pool_series()
        yield from self._cache_series()

    def _pool_series(self) -> Iterable:
        pool = _sources.pool()
        loaded = pool.loaded_models()
        yield GaugeMetricFamily("omlx_models_loaded", "Models loaded in this process", value=len(loaded))
        memory = GaugeMetricFamily(
            "omlx_model_memory_bytes",
            "Memory counted for a loaded model (weights, KV cache, hot tier), against --max-model-memory",
            labels=["model"],
        )
        running = GaugeMetricFamily(
            "omlx_requests_running", "Requests prefilling or decoding in a model's engine", labels=["model"]
        )
        waiting = GaugeMetricFamily(
            "omlx_requests_waiting", "Requests queued in a model's engine, not running yet", labels=["model"]
        )
        speculative = {
            key: CounterMetricFamily(f"omlx_speculative_{key}", text, labels=["model"])
            for key, text in SPECULATIVE_SERIES.items()
        }
        for model_id, info in sorted(loaded.items()):
            memory.add_metric([model_id], info["memory_bytes"])
            stats = info["engine"].stats()
            r, w = stats.running, stats.waiting
            running.add_metric([model_id], r)
            waiting.add_metric([model_id], w)
            for key, value in stats.speculative.items():
                speculative[key].add_metric([model_id], value)
        yield from (memory, running, waiting, *speculative.values())
        yield GaugeMetricFamily(
            "omlx_model_memory_used_bytes",
            "Memory counted for loaded models and loads in progress",
            value=pool.used_bytes(),
        )
        if pool.max_model_memory is not None:
            yield GaugeMetricFamily(
                "omlx_model_memory_limit_bytes", "--max-model-memory", value=pool.max_model_memory
            )
        rss = _sources.process_rss()
        if rss is not None:
            yield GaugeMetricFamily("omlx_process_memory_bytes", "Resident memory of this process", value=rss)
        import mlx.core as mx  # the server process has it loaded already (it serves models)

        yield GaugeMetricFamily(
            "omlx_mlx_active_memory_bytes",
            "Memory of MLX arrays alive in this process",
            value=mx.get_active_memory(),
        )
        yield GaugeMetricFamily(
            "omlx_mlx_cache_memory_bytes",
            "Memory MLX keeps from freed arrays for reuse",
            value=mx.get_cache_memory(),
        )
        if pool.max_process_memory is not None:
            yield GaugeMetricFamily(
                "omlx_process_memory_limit_bytes", "--max-process-memory", value=pool.max_process_memory
            )
        yield from _guard_series()

    def _cache_series(self) -> Iterable:
        counts = _cache_counts_by_model()
        with _lock:
            live = list(_live.values())
        hits = CounterMetricFamily(
            "omlx_cache_hit_tokens",
            "Prompt tokens served from the KV block cache, by tier",
            labels=["model", "tier"],
        )
        misses = CounterMetricFamily(
            "omlx_cache_miss_tokens",
            "Prompt tokens looked up that a tier "
            "did not serve: hot, tokens not in RAM; cold, tokens computed "
            "(in neither tier)",
            labels=["model", "tier"],
        )
        evictions = CounterMetricFamily(
            "omlx_cache_evictions",
            "Blocks evicted: hot, from RAM (to "
            "the cold tier when there is one); cold, files removed by "
            "GC (size cap, TTL)",
            labels=["model", "tier"],
        )
        lookups = CounterMetricFamily("omlx_cache_lookups", "Prefix lookups", labels=["model"])
        lookup_tokens = CounterMetricFamily(
            "omlx_cache_lookup_tokens",
            "Prompt tokens looked up (all but the last of each prompt)",
            labels=["model"],
        )
        evicted_bytes = CounterMetricFamily(
            "omlx_cache_hot_evicted_bytes", "Bytes of blocks evicted from the hot tier", labels=["model"]
        )
        writes = CounterMetricFamily(
            "omlx_cache_cold_writes", "Block files written to the cold tier", labels=["model"]
        )
        reads = CounterMetricFamily(
            "omlx_cache_cold_reads", "Block files read back from the cold tier", labels=["model"]
        )
        write_errors = CounterMetricFamily(
            "omlx_cache_cold_write_errors", "Blocks the cold tier failed to write", labels=["model"]
        )
        for model_id, c in sorted(counts.items()):
            if "lookups" not in c:
                continue  # caching off for this model
            looked = c.get("lookup_tokens", 0)
            hot, cold = c.get("hot_hit_tokens", 0), c.get("cold_hit_tokens", 0)
            lookups.add_metric([model_id], c.get("lookups", 0))
            lookup_tokens.add_metric([model_id], looked)
            hits.add_metric([model_id, "hot"], hot)
            hits.add_metric([model_id, "cold"], cold)
            misses.add_metric([model_id, "hot"], max(0, looked - hot))
            misses.add_metric([model_id, "cold"], max(0, looked - hot - cold))
            evictions.add_metric([model_id, "hot"], c.get("hot_evictions", 0))
            evicted_bytes.add_metric([model_id], c.get("hot_evicted_bytes", 0))
            if "cold_writes" in c:
                evictions.add_metric([model_id, "cold"], c.get("cold_evictions", 0))
                writes.add_metric([model_id], c["cold_writes"])
                reads.add_metric([model_id], c.get("cold_reads", 0))
                write_errors.add_metric([model_id], c.get("cold_write_errors", 0))
        yield from (
            lookups,
            lookup_tokens,
            hits,
            misses,
            evictions,
            evicted_bytes,
            writes,
            reads,
            write_errors,
        )

        stored = GaugeMetricFamily(
            "omlx_cache_bytes",
            "Bytes of KV blocks held now: hot, in RAM; cold, block files on disk",
            labels=["model", "tier"],
        )
        blocks = GaugeMetricFamily(
            "omlx_cache_blocks", "KV blocks held now, by tier", labels=["model", "tier"]
        )
        capacity = GaugeMetricFamily(
            "omlx_cache_capacity_bytes",
            "The hot tier's budget (--hot-cache-max-size)",
            labels=["model", "tier"],
        )
        for model_id, engine in sorted(live, key=lambda pair: pair[0]):
            stats = engine.stats()
            hot, cold = stats.cache.get("hot"), stats.cache.get("cold")
            if hot is not None:
                stored.add_metric([model_id, "hot"], hot.get("bytes", 0))
                blocks.add_metric([model_id, "hot"], hot.get("blocks", 0))
                if stats.hot_capacity_bytes is not None:
                    capacity.add_metric([model_id, "hot"], stats.hot_capacity_bytes)
            if cold is not None:
                stored.add_metric([model_id, "cold"], cold.get("bytes", 0))
                blocks.add_metric([model_id, "cold"], cold.get("files", 0))
        yield from (stored, blocks, capacity)


def _guard_series() -> Iterable:
    """The memory guard's figures (inference/pool/memory_guard.py); only the on/off gauge when
    it is off."""
    guard = _sources.guard()
    yield GaugeMetricFamily(
        "omlx_memory_guard_enabled", "Whether the memory guard runs", value=int(guard is not None)
    )
    if guard is None:
        return
    state = guard.snapshot()
    yield GaugeMetricFamily(
        "omlx_memory_pressure_level",
        "Memory pressure: 0 normal, 1 high (new requests refused), 2 critical (relieving)",
        value=state["level"],
    )
    if state["limit"] is not None:
        ratio = GaugeMetricFamily(
            "omlx_memory_pressure_ratio",
            "Used share of the tightest memory limit, by the limit's source",
            labels=["source"],
        )
        ratio.add_metric([state["source"]], state["ratio"])
        used = GaugeMetricFamily(
            "omlx_memory_guard_used_bytes",
            "Bytes counted against the tightest memory limit",
            labels=["source"],
        )
        used.add_metric([state["source"]], state["used"])
        limit = GaugeMetricFamily(
            "omlx_memory_guard_limit_bytes", "The tightest memory limit", labels=["source"]
        )
        limit.add_metric([state["source"]], state["limit"])
        yield from (ratio, used, limit)
    actions = CounterMetricFamily(
        "omlx_memory_guard_actions",
        "What the memory guard did: reject "
        "(requests refused), preempt (requests preempted), shrink (hot "
        "tiers halved), unload (models unloaded)",
        labels=["action"],
    )
    for action, count in state["counts"].items():
        actions.add_metric([action], count)
    yield actions


REGISTRY.register(EngineCollector())
