"""Removing rejected positions from a decode batch's caches, a different number per row.

The batch caches (mlx-lm's ``BatchKVCache``, and ``BatchQuantizedKVCache``, the same with keys
and values held as quantized triples) are left-padded: every row's newest position is
the last one, so a row cannot simply be shorter at its end. The common part of the rollback is
a ``trim`` of every row; a row that drops more is shifted right by the difference
(``prepare(right_padding=...)`` + ``finalize()``: a roll, and that much more left padding),
which moves its garbage past the end, where the next step overwrites it. Both caches trim the
same way (``_idx`` and ``offset``), and the quantized one rolls each of its six arrays.
"""

from __future__ import annotations

from typing import Sequence

from mlx_lm.models.cache import BatchKVCache

from ..cache_io import leaves
from ..quantized_kv import BatchQuantizedKVCache

ROLLABLE = (BatchKVCache, BatchQuantizedKVCache)


def can_roll_back(caches) -> bool:
    """Whether every layer's cache is full attention, float or quantized (the only kinds rolled
    back so far: sliding windows have overwritten what they would restore, recurrent state
    needs a snapshot)."""
    return caches is not None and all(type(c) in ROLLABLE for c in leaves(caches))


def roll_back(caches, remove: Sequence[int]) -> None:
    """Drop the newest ``remove[i]`` positions of row i from every layer."""
    least = min(remove)
    extra = [r - least for r in remove]
    shift = any(extra)
    for c in leaves(caches):
        if least:
            c.trim(least)
        if shift:
            c.prepare(right_padding=extra)
            c.finalize()
