"""Series of /metrics for a model split across machines (``omlx serve --distributed``): how it
is cut (``omlx_rank_info``: pipeline or tensor parallel, each rank's layers and share of the
heads) and every rank's block cache and memory, as rank 0 last asked them
(inference/distributed/rank_stats.py), one sample per rank of each loaded split model. Rank 0's
figures are in the usual series too."""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from . import collector
from .definitions import REGISTRY


def rank_figures() -> Dict[str, Tuple[str, List[Dict[str, int]]]]:
    """Loaded split model id -> (how it is cut, "pipeline" or "tensor"; its ranks' last figures,
    rank order); {} when none is loaded."""
    with collector._lock:
        live = list(collector._live.values())
    out = {}
    for model_id, engine in live:
        figures = getattr(engine, "rank_figures", None)
        if figures is not None and figures.ranks:
            out[model_id] = (figures.parallel, figures.ranks)
    return out


def holds(figures: Dict[str, int]) -> str:
    """What a rank holds of the model, in words (the status page), from its figures."""
    start, end, total, shards = (
        figures[k] for k in ("layer_start", "layer_end", "num_layers", "head_shards")
    )
    if shards > 1:
        return f"all {total} layers, 1/{shards} of the heads"
    return f"layers {start}-{end - 1} of {total}" if end - start > 1 else f"layer {start} of {total}"


class RankCollector:
    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        models = rank_figures()
        if not models:
            return
        info = GaugeMetricFamily(
            "omlx_rank_info",
            "Split model: 1 per rank, labelled with how the model is cut (parallel: pipeline or "
            "tensor), the rank's decoder layers (first-last, of layers_total) and its share of "
            "their heads (1/1 in pipeline, 1/ranks in tensor)",
            labels=["model", "rank", "parallel", "layers", "layers_total", "heads"],
        )
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
        for model_id, (parallel, ranks) in sorted(models.items()):
            for rank, f in enumerate(ranks):
                r = str(rank)
                layers = f"{f['layer_start']}-{f['layer_end'] - 1}"
                heads = f"1/{f['head_shards']}"
                info.add_metric([model_id, r, parallel, layers, str(f["num_layers"]), heads], 1)
                lookups.add_metric([model_id, r], f["lookup_tokens"])
                hits.add_metric([model_id, r, "hot"], f["hot_hit_tokens"])
                hits.add_metric([model_id, r, "cold"], f["cold_hit_tokens"])
                tiers.add_metric([model_id, r, "hot"], f["hot_bytes"])
                tiers.add_metric([model_id, r, "cold"], f["cold_bytes"])
                if f["memory_bytes"]:
                    memory.add_metric([model_id, r, "process"], f["memory_bytes"])
                memory.add_metric([model_id, r, "mlx"], f["mlx_bytes"])
        yield from (info, lookups, hits, tiers, memory)


REGISTRY.register(RankCollector())
