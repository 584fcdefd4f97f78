"""Rows joining a decode batch into its spare rows, without a copy of the rows already there.

mlx-lm's ``BatchKVCache.extend`` pads the batch's cache and the newcomers' to one width and
concatenates them: every layer's keys and values of the whole batch are copied, and the next
pass waits for the copy (what a row leaving through ``filter`` cost, ``batch_leave``). In a steady
agent load a row leaves when its answer ends and the agent's next turn joins a few steps later;
after ``batch_leave.leave`` the batch's buffers keep the leaving rows as spare rows (``Spare``),
and ``join`` writes a joining row into one:

- its keys and values go into a spare row, right-aligned to the batch's write index (``_idx``):
  the positions before them are its left padding, masked as every row's is (they hold what the
  row that left had there: finite values, weighted zero);
- its offset and left padding are appended, and the cache's ``keys`` and ``values`` become one
  row more of the same buffers, which the next steps write into in place (``Spare``).

Only where it fits: a full-attention cache (``SpareBatchKVCache``, or its holed class: a
rollback's holes stay masked, the new rows have none) whose buffers are still its own, rows that
are plain ``KVCache``s of its heads, dims and dtypes and no longer than ``_idx`` (a longer one
would move every row to the right: the copy ``extend`` makes), and a spare row for each.
Otherwise, and for every other kind of cache (sliding windows, recurrent state, quantized KV),
the rows are merged and the batch extended as before, in the same order: the batch computes the
same either way.
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .batch_leave import SpareBatchKVCache, SpareHoledBatchKVCache


def fits(batch_cache, rows: Sequence) -> bool:
    """Whether ``rows`` (one layer's caches, one per joining row) can join ``batch_cache`` in
    place (see the module docstring)."""
    if type(batch_cache) not in (SpareBatchKVCache, SpareHoledBatchKVCache) or batch_cache.keys is None:
        return False
    buffers = batch_cache.spare_buffers()
    if buffers is None:
        return False
    keys, values = buffers
    if batch_cache.keys.shape[0] + len(rows) > keys.shape[0]:
        return False
    return all(
        type(c) is KVCache
        and c.keys is not None
        and 0 < c.offset <= batch_cache._idx
        and c.keys.shape[1] == keys.shape[1]
        and c.keys.shape[3] == keys.shape[3]
        and c.values.shape[3] == values.shape[3]
        and c.keys.dtype == keys.dtype
        and c.values.dtype == values.dtype
        for c in rows
    )


def join(batch_cache, rows: Sequence) -> bool:
    """Write ``rows`` (one layer's caches, one per joining row) into ``batch_cache``'s spare
    rows, after its rows, in order; False, and nothing done, where they do not fit (``fits``)."""
    if not rows or not fits(batch_cache, rows):
        return False
    keys, values = batch_cache.spare_buffers()
    present, idx = batch_cache.keys.shape[0], batch_cache._idx
    # The buffers' only holders while they are written: MLX then writes them in place.
    batch_cache._buffers = batch_cache._views = batch_cache.keys = batch_cache.values = None
    lengths = [c.offset for c in rows]
    for j, (c, n) in enumerate(zip(rows, lengths)):
        keys[present + j : present + j + 1, :, idx - n : idx, :] = c.keys[..., :n, :]
        values[present + j : present + j + 1, :, idx - n : idx, :] = c.values[..., :n, :]
    batch_cache._set_rows(keys, values, present + len(rows))
    added = mx.array(lengths, dtype=batch_cache.offset.dtype)
    batch_cache.offset = mx.concatenate([batch_cache.offset, added])
    batch_cache.left_padding = mx.concatenate(
        [batch_cache.left_padding, (idx - added).astype(batch_cache.left_padding.dtype)]
    )
    if getattr(batch_cache, "valid", None) is not None:  # a rollback's holes: the new rows have none
        fresh = mx.ones((len(rows), batch_cache.valid.shape[1]), dtype=mx.bool_)
        batch_cache.valid = mx.concatenate([batch_cache.valid, fresh])
        batch_cache.holes = batch_cache.holes + [0] * len(rows)
    return True
