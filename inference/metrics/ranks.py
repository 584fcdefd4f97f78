"""Series of /metrics for a model split across machines (``omlx serve --distributed``): every
rank's block cache and memory, as rank 0 last asked them (inference/distributed/rank_stats.py),
one sample per rank of each loaded split model. Rank 0's figures are in the usual series too."""

from __future__ import annotations

from typing import Dict, Iterable, List

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from . import collector
from .definitions import REGISTRY


def rank_figures() -> Dict[str, List[Dict[str, int]]]:
    """Loaded split model id -> its ranks' last figures (rank order); {} when none is loaded."""
    with collector._lock:
        live = list(collector._live.values())
    out = {}
    for model_id, engine in live:
        figures = getattr(engine, "rank_figures", None)
        if figures is not None and figures.ranks:
            out[model_id] = figures.ranks
    return out


class RankCollector:
    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        models = rank_figures()
        if not models:
            return
        lookups = CounterMetricFamily(
            "omlx_rank_lookup_tokens",
            "Split model: prompt tokens a rank looked up in its block cache",
            labels=["model", "rank"],
        )
        hits = CounterMetricFamily(
            "omlx_rank_hit_tokens",
            "Split model: prompt tokens a rank served from its block cache, by tier",
            labels=["model", "rank", "tier"],
        )
        tiers = GaugeMetricFamily(
            "omlx_rank_cache_bytes",
            "Split model: bytes of a rank's KV blocks, by tier (hot: RAM, cold: its SSD folder)",
            labels=["model", "rank", "tier"],
        )
        memory = GaugeMetricFamily(
            "omlx_rank_memory_bytes",
            "Split model: memory of a rank, by kind (process: resident; mlx: MLX's active memory)",
            labels=["model", "rank", "kind"],
        )
        for model_id, ranks in sorted(models.items()):
            for rank, f in enumerate(ranks):
                r = str(rank)
                lookups.add_metric([model_id, r], f["lookup_tokens"])
                hits.add_metric([model_id, r, "hot"], f["hot_hit_tokens"])
                hits.add_metric([model_id, r, "cold"], f["cold_hit_tokens"])
                tiers.add_metric([model_id, r, "hot"], f["hot_bytes"])
                tiers.add_metric([model_id, r, "cold"], f["cold_bytes"])
                if f["memory_bytes"]:
                    memory.add_metric([model_id, r, "process"], f["memory_bytes"])
                memory.add_metric([model_id, r, "mlx"], f["mlx_bytes"])
        yield from (lookups, hits, tiers, memory)


REGISTRY.register(RankCollector())
