"""Removing rejected positions from a decode batch's caches, a different number per row.

The batch caches (mlx-lm's ``BatchKVCache``) are left-padded: every row's newest position is
the last one, so a row cannot simply be shorter at its end. The common part of the rollback is
a ``trim`` of every row; a row that drops more is shifted right by the difference
(``prepare(right_padding=...)`` + ``finalize()``: a roll, and that much more left padding),
which moves its garbage past the end, where the next step overwrites it.
"""

from __future__ import annotations

from typing import Sequence

from mlx_lm.models.cache import BatchKVCache

from ..cache_io import leaves


def can_roll_back(caches) -> bool:
    """Whether every layer's cache is full attention (the only kind rolled back so far:
    sliding windows have overwritten what they would restore, recurrent state needs a
    snapshot)."""
    return caches is not None and all(type(c) is BatchKVCache for c in leaves(caches))


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
