"""GET /v1/cache/status: the KV block cache of each loaded model (omlx's, not in OpenAI's API).

One row per loaded model: its fingerprint (which names its cold-tier directory), the hot tier
(blocks and bytes in RAM against its budget), this process's view of the cold tier, the hit
counters, and the KV held by requests now (``in_use``: all zero once every request has ended and
its KV was freed; the soak test, tests/live/test_soak.py, checks it). Models that are not loaded have
no hot tier; `omlx cache` reads their cold tier from disk. The figures are read without stopping
the engine, so they may lag a step behind.
"""
from __future__ import annotations

from ninja import Router

from inference.model_registry import get_registry

from .auth import check_api_key

router = Router(tags=["omlx cache"])


@router.get("/cache/status")
def cache_status(request):
    check_api_key(request)
    registry = get_registry()
    rows = []
    for model_id in registry.ids():
        engine = registry.loaded(model_id)
        if engine is not None:
            rows.append(dict(_cache_row(engine.prefix_cache), in_use=_in_use(engine), id=model_id))
    return {"object": "list", "data": rows}


def _cache_row(cache) -> dict:
    hot = getattr(cache, "hot", None)
    if hot is None:  # prefix caching is off for this model
        return {"fingerprint": None, "hot": None, "cold": None, "stats": None}
    cold = cache.cold
    stats = cache.stats
    return {
        "fingerprint": cache.fingerprint.hex,
        "hot": {"blocks": len(hot), "bytes": hot.used_bytes, "capacity_bytes": hot.capacity_bytes,
                "evictions": hot.stats.evictions},
        "cold": None if cold is None or not cold.enabled else {
            "dir": str(cold.dir), "files": cold.stats.files, "bytes": cold.stats.bytes,
            "writes": cold.stats.writes, "reads": cold.stats.reads, "queue_depth": cold.stats.queue_depth},
        "stats": {"lookups": stats.lookups, "lookup_tokens": stats.lookup_tokens,
                  "hot_hit_tokens": stats.hot_hit_tokens, "cold_hit_tokens": stats.cold_hit_tokens,
                  "hit_rate": round(stats.hit_rate, 4)},
    }


def _in_use(engine) -> dict:
    """What requests hold now: requests submitted and not finished, those the scheduler runs,
    rows of the decode batch, KV token slots they take, hot blocks referenced by a request."""
    scheduler = getattr(engine, "scheduler", None)
    runner = getattr(engine, "runner", None)
    hot = getattr(engine.prefix_cache, "hot", None)
    running = list(scheduler.running) if scheduler is not None else []
    return {
        "requests": engine.num_active(),
        "running": len(running),
        "decode_rows": len(runner.batch) if runner is not None else 0,
        "kv_tokens": scheduler.kv_demand(running) if scheduler is not None else 0,
        "held_blocks": sum(1 for block in hot.blocks() if block.ref_count > 0) if hot is not None else 0,
    }
