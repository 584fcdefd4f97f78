"""Every rank's figures for rank 0's /metrics and status page (a model split across machines).

Each rank keeps its own layers' blocks in its own tiers (``rank_cache``), so its hits, its RAM
and SSD tier and its memory are its own; each also says what it holds of the model (its layers,
and how many ranks share their heads: 1 in pipeline parallel, every rank in tensor parallel).
Rank 0 asks for them between steps: once the model is loaded, every ``EVERY`` seconds while its
engine works, and after the step that ends its work. It sends ``{"op": "figures"}`` over the
plan channel, and every rank, rank 0 included, gives ``FIELDS`` in one ``all_gather`` of int64
(no JSON back: a rank can only send numbers). Rank 0 keeps the last answer (``RankFigures.ranks``,
one dict per rank, rank order, with the group's ``parallel`` mode); nothing is asked while the
engine is idle (the figures do not change then, but for memory).
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional

import mlx.core as mx
import numpy as np

from .plan_channel import collective

OP = "figures"
EVERY = 2.0  # seconds between two requests for the figures, at most one per step
FIELDS = (
    "lookup_tokens",  # prompt tokens looked up in the rank's block cache
    "hot_hit_tokens",  # of those, served from its RAM tier
    "cold_hit_tokens",  # of those, served from its SSD tier
    "hot_bytes",  # its RAM tier's blocks
    "cold_bytes",  # its SSD tier's block files
    "memory_bytes",  # resident memory of its process (0: unknown)
    "mlx_bytes",  # MLX's active memory (weights and KV of its layers)
    "layer_start",  # the first decoder layer it runs
    "layer_end",  # one past the last
    "num_layers",  # of the model's
    "head_shards",  # ranks that share the heads of each of its layers (1: it holds them all)
)


def own_figures(cache, part) -> List[int]:
    """This rank's ``FIELDS``, from its block cache (None: caching off), what it holds of the
    model (``part``: a pipeline ``LayerSplit`` or a tensor ``TensorShard``) and its process."""
    read = getattr(cache, "snapshot", None)
    snapshot = read() if read is not None else {}
    lookups, hot, cold = (snapshot.get(k) or {} for k in ("lookups", "hot", "cold"))
    try:
        from inference.pool.memory import process_rss

        rss = process_rss() or 0
    except Exception:  # the figure only: a platform without it reports 0
        rss = 0
    values = [
        lookups.get("lookup_tokens", 0),
        lookups.get("hot_hit_tokens", 0),
        lookups.get("cold_hit_tokens", 0),
        hot.get("bytes", 0),
        cold.get("bytes", 0),
        rss,
        mx.get_active_memory(),
        *held(part),
    ]
    return [max(0, int(v)) for v in values]


def held(part) -> List[int]:
    """``part``'s layer start, end, layer count and head shards (the last four ``FIELDS``)."""
    if hasattr(part, "start"):  # a LayerSplit: its slice of the layers, every head of them
        return [part.start, part.end, part.num_layers, 1]
    return [0, part.num_layers, part.num_layers, part.size]  # a TensorShard: 1/size of every layer


def exchange(group, values: List[int]) -> List[List[int]]:
    """Every rank: each rank's ``values`` (``len(FIELDS)`` ints), rank order."""
    mine = mx.array(np.array(values, dtype=np.int64).reshape(1, len(FIELDS)))
    gathered = mx.distributed.all_gather(mine, group=group, stream=mx.cpu)
    collective(gathered)
    return np.array(gathered).reshape(-1, len(FIELDS)).tolist()


class RankFigures:
    """Rank 0's side: ``collect`` asks every rank (the engine says when); ``ranks`` is the last
    answer (any thread); ``parallel``: how the model is cut ("pipeline" or "tensor")."""

    def __init__(self, parallel: str, clock=time.monotonic):
        self.parallel = parallel
        self._clock = clock
        self._at: Optional[float] = None
        self._lock = threading.Lock()
        self._ranks: List[Dict[str, int]] = []

    def due(self) -> bool:
        return self._at is None or self._clock() - self._at >= EVERY

    def collect(self, channel, cache, part) -> None:
        """Ask every rank for its figures (engine thread, between steps); ``cache`` and
        ``part``: rank 0's (``own_figures``). GroupLost as any exchange."""
        channel.send({"op": OP})
        rows = exchange(channel.group, own_figures(cache, part))
        with self._lock:
            self._ranks = [dict(zip(FIELDS, row)) for row in rows]
            self._at = self._clock()

    @property
    def ranks(self) -> List[Dict[str, int]]:
        with self._lock:
            return [dict(r) for r in self._ranks]
