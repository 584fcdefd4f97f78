"""Rows leaving a decode batch without a copy of the rows that stay.

mlx-lm's ``BatchKVCache.filter`` gathers the staying rows into new arrays: every layer's keys and
values of the whole batch are copied, and the next pass waits for the copy (a row leaving 16
rows of 2,048 tokens of a 0.5B model's KV, float32, 24 layers: 116 ms, some plain steps; in a
steady load a row leaves every few steps). Here the rows that stay keep their places in the
same buffers instead:

- ``leave_order`` numbers the staying rows: each leaving row's slot below the new row count is
  taken by a staying row from past it, every other row keeps its slot;
- ``leave`` moves those few rows into their new slots, in place (a copy of the moved rows only),
  and the cache's ``keys`` and ``values`` become the first rows of its buffers (``Spare``: the
  rows past them are spare, unused);
- ``Spare.update_and_fetch`` writes the next positions into the buffers in place, as mlx-lm
  writes into its own (a slice of an array is a new array to MLX: written to, it would be
  copied); the buffers go, the spare rows with them, when the cache next grows (mlx-lm grows
  by 256 positions) or when other code replaces ``keys`` (a join's ``extend``, a rollback's
  roll, holes' ``compact``), which then holds a plain array again; rows joining take the spare
  rows (``batch_join``).

Full attention only (mlx-lm's ``BatchKVCache`` and the engine's holed one,
``speculative.holes``); other caches (sliding windows, recurrent state, quantized KV) are
filtered as before, with the same order. A copy is still made, as ``filter`` makes it, when the
rows that stay would leave more than a quarter of the buffer as left padding (``filter`` cuts the
common left padding: attention over it costs every step) or when half of the buffer's rows or
more would be spare (their memory is given back), and when the caller needs the memory back
(a preemption, memory pressure: ``DecodeBatch.remove(give_back=True)``).
"""

from __future__ import annotations

from typing import List, Sequence

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from .cache_io import leaves
from .speculative.holes import HOLED, HoledBatchKVCache

PADDING_KEPT = 4  # copy when the common left padding would pass 1/4 of the filled width ...
SPARE_KEPT = 2  # ... or the spare rows would be half the buffer's rows or more


def leave_order(rows: int, gone: Sequence[int]) -> List[int]:
    """The batch's rows after the rows ``gone`` leave, as indices into the rows before: row j
    of the new batch is row ``order[j]`` of the old one. A leaving row's slot below the new
    count takes the last staying row past it; every other staying row keeps its slot."""
    gone = set(gone)
    n = rows - len(gone)
    tail = [i for i in range(n, rows) if i not in gone]
    return [tail.pop() if j in gone else j for j in range(n)]


class Spare:
    """A full-attention batch cache whose ``keys`` and ``values`` are the first rows of its
    buffers (see the module docstring)."""

    _buffers = None  # (keys, values): the arrays ``keys`` and ``values`` are the first rows of
    _views = None  # (keys, values) as this class set them: replaced since means not ours

    def _set_rows(self, keys: mx.array, values: mx.array, rows: int) -> None:
        self._buffers = (keys, values)
        self.keys, self.values = keys[:rows], values[:rows]
        self._views = (self.keys, self.values)

    def spare_buffers(self):
        """The buffers, or None: none set, or ``keys``/``values`` replaced since."""
        if self._buffers is None:
            return None
        if self.keys is not self._views[0] or self.values is not self._views[1]:
            self._buffers = self._views = None
        return self._buffers

    def update_and_fetch(self, keys, values):
        buffers = self.spare_buffers()
        prev, width = self._idx, keys.shape[2]
        if buffers is None or prev + width > buffers[0].shape[2]:
            self._buffers = self._views = None  # plain again: grown from the rows, spare ones dropped
            return super().update_and_fetch(keys, values)
        rows = keys.shape[0]
        buffer_keys, buffer_values = buffers
        # The buffers' only holders while they are written: MLX then writes them in place.
        self._buffers = self._views = self.keys = self.values = None
        buffer_keys[:rows, :, prev : prev + width, :] = keys
        buffer_values[:rows, :, prev : prev + width, :] = values
        self.offset = self.offset + width
        self._idx += width
        self._set_rows(buffer_keys, buffer_values, rows)
        return self.keys_and_values()


class SpareBatchKVCache(Spare, BatchKVCache):
    pass


class SpareHoledBatchKVCache(Spare, HoledBatchKVCache):
    pass


SPARE = {
    BatchKVCache: SpareBatchKVCache,
    HoledBatchKVCache: SpareHoledBatchKVCache,
    SpareBatchKVCache: SpareBatchKVCache,
    SpareHoledBatchKVCache: SpareHoledBatchKVCache,
}
HOLED[SpareBatchKVCache] = SpareHoledBatchKVCache  # a spare cache's first holes (``holes.punch``)


def _in_place(c, order: List[int], index: mx.array) -> bool:
    """Whether ``c`` can lose rows without a copy (see the module docstring); ``index``: ``order``
    as an array."""
    if type(c) not in SPARE or c.keys is None:
        return False
    buffers = c.spare_buffers() if isinstance(c, Spare) else None
    rows = (buffers[0] if buffers is not None else c.keys).shape[0]
    if len(order) * SPARE_KEPT <= rows:
        return False
    padding = min(c.left_padding[index].tolist())
    return padding * PADDING_KEPT < c._idx


def leave(caches, order: List[int], in_place: bool = True) -> None:
    """Keep rows ``order`` of every leaf cache of ``caches`` (a batch's), in that order
    (``leave_order``'s): the full-attention caches in place where they can (``in_place``: the
    caller does not need the leaving rows' memory back now), the others through their
    ``filter``."""
    moves = [(j, i) for j, i in enumerate(order) if i != j]
    rows = len(order)
    index = mx.array(order)
    plain, spare = [], []
    for c in leaves(caches):
        (spare if in_place and _in_place(c, order, index) else plain).append(c)
    for c in plain:
        c.filter(index)
    if not spare:
        return
    buffers = []
    for c in spare:
        c.__class__ = SPARE[type(c)]
        buffers.append(c.spare_buffers() or (c.keys, c.values))
        c._buffers = c._views = c.keys = c.values = None
    # The moved rows are copied out and evaluated first: MLX writes a buffer in place when, as
    # the write is evaluated, nothing else holds the buffer (an unevaluated copy of its rows would,
    # and the write would copy the whole buffer).
    moved = mx.array([i for _, i in moves]) if moves else None
    taken = [(k[moved], v[moved]) if moves else None for k, v in buffers]
    mx.eval([a for pair in taken if pair is not None for a in pair])
    for c, (keys, values), pair in zip(spare, buffers, taken):
        for m, (j, _) in enumerate(moves):
            keys[j : j + 1] = pair[0][m : m + 1]
            values[j : j + 1] = pair[1][m : m + 1]
        c._set_rows(keys, values, rows)
        c.offset = c.offset[index]
        c.left_padding = c.left_padding[index]
        if getattr(c, "valid", None) is not None:  # holes (``speculative.holes``) move with their rows
            c.valid = c.valid[index]
            c.holes = [c.holes[i] for i in order]
            c._recount()
