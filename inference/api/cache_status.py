"""GET /v1/cache/status: the KV block cache of each loaded model (omlx's, not in OpenAI's API).

One row per loaded model: its fingerprint (which names its cold-tier directory), the hot tier
(blocks and bytes in RAM against its budget), this process's view of the cold tier and the hit
counters. Models that are not loaded have no hot tier; `omlx cache` reads their cold tier from
disk. The figures are read without stopping the engine, so they may lag a step behind.
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
            rows.append(dict(_cache_row(engine.prefix_cache), id=model_id))
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
