"""GET /v1/cache/status: the KV block cache of each loaded model (omlx's, not in OpenAI's API).

One row per loaded model: its fingerprint (which names its cold-tier directory), the format of
its attention KV (``kv_format``: "float" or "q<bits>g<group>" with kv_bits), the hot tier
(blocks and bytes in RAM against its budget), this process's view of the cold tier, the hit
counters, and the KV held by requests now (``in_use``: all zero once every request has ended and
its KV was freed; the soak test, tests/live/test_soak.py, checks it). Models that are not loaded have
no hot tier; `omlx cache` reads their cold tier from disk. The figures are read without stopping
the engine, so they may lag a step behind.
"""

from __future__ import annotations

from ninja import Router

from inference.pool import get_pool

from ..common.auth import check_api_key
from inference.keys import scopes

router = Router(tags=["omlx cache"])


@router.get("/cache/status")
def cache_status(request):
    check_api_key(request, scopes.ADMIN)
    registry = get_pool()
    rows = []
    for model_id in registry.ids():
        engine = registry.loaded(model_id)
        if engine is not None:
            stats = engine.stats(held_blocks=True)
            rows.append(
                dict(_cache_row(stats), kv_format=stats.kv_format, in_use=_in_use(stats), id=model_id)
            )
    return {"object": "list", "data": rows}


def _cache_row(stats) -> dict:
    if stats.hot_capacity_bytes is None:  # prefix caching is off for this model
        return {"fingerprint": None, "hot": None, "cold": None, "stats": None}
    hot, cold, lookups = stats.cache.get("hot", {}), stats.cache.get("cold"), stats.cache.get("lookups", {})
    return {
        "fingerprint": stats.fingerprint,
        "hot": {
            "blocks": hot.get("blocks", 0),
            "bytes": hot.get("bytes", 0),
            "capacity_bytes": stats.hot_capacity_bytes,
            "evictions": hot.get("evictions", 0),
        },
        "cold": None
        if stats.cold_dir is None or cold is None
        else {
            "dir": stats.cold_dir,
            "files": cold["files"],
            "bytes": cold["bytes"],
            "writes": cold["writes"],
            "reads": cold["reads"],
            "queue_depth": cold["queue_depth"],
        },
        "stats": {
            "lookups": lookups.get("lookups", 0),
            "lookup_tokens": lookups.get("lookup_tokens", 0),
            "hot_hit_tokens": lookups.get("hot_hit_tokens", 0),
            "cold_hit_tokens": lookups.get("cold_hit_tokens", 0),
            "hit_rate": round(stats.cache.get("hit_rate", 0.0), 4),
        },
    }


def _in_use(stats) -> dict:
    """What requests hold now: requests submitted and not finished, those the scheduler runs,
    rows of the decode batch, KV token slots they take, hot blocks referenced by a request."""
    return {
        "requests": stats.active,
        "running": stats.running,
        "decode_rows": stats.decode_rows,
        "kv_tokens": stats.kv_tokens,
        "held_blocks": stats.held_blocks or 0,
    }
