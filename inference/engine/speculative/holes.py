"""Rejected positions left in place as holes: the full-attention rollback of a verify pass whose
rows keep different numbers of drafted tokens (``rollback.roll_back``).

The batch caches are left-padded: every row's newest position is the buffer's last one. A row
that keeps fewer tokens than another cannot just be shorter at its end; right-aligning it (a
roll of the row, mlx-lm's ``dynamic_roll``) moves every position of the whole batch, every
layer: several plain decode steps of a 16-row batch at a 3.5K context. Instead the row's
rejected positions stay where they are and are masked:

- ``valid`` (bool, rows x positions, as long as the buffer was when a hole was last made;
  positions beyond it are valid) is ANDed into every mask the cache makes (``make_mask``), so
  no query attends to a hole, exactly as none attends to left padding;
- the row's ``offset`` goes back by its holes: the next token's RoPE position is its true one;
- nothing of the keys and values is read or written: a rollback costs a few small index ops.

A hole costs attention over one masked position per step until it is gone. Holes go when a row
leaves (``filter`` drops them with the row), and all at once (``compact``: one gather of the
buffer, today's roll, with every hole moved into the left padding) when some row holds more than
``1 / COMPACT_FRACTION`` of the buffer (at least ``COMPACT_LEAST``), or before a right-padded pass
(``finalize``). A row taken out (``extract``: a snapshot, preemption) is read without its holes.

The holed classes are mlx-lm's ``BatchKVCache`` and the engine's ``BatchQuantizedKVCache``,
with ``Holes`` in front; a cache becomes one when it gets its first hole (``punch``).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import BatchKVCache, KVCache

from ..quantized_kv import BatchQuantizedKVCache, QuantizedKV

COMPACT_FRACTION = 32  # compact when a row's holes pass 1/32 of the buffer ...
COMPACT_LEAST = 32  # ... and 32 positions


def _widen(valid: Optional[mx.array], rows: int, n: int) -> mx.array:
    """``valid`` over ``n`` positions (positions beyond its length valid)."""
    if valid is None:
        return mx.ones((rows, n), dtype=mx.bool_)
    if valid.shape[1] >= n:
        return valid[:, :n]
    return mx.concatenate([valid, mx.ones((rows, n - valid.shape[1]), dtype=mx.bool_)], axis=1)


class Holes:
    """Masked rejected positions in a left-padded batch cache (see the module docstring)."""

    valid: Optional[mx.array] = None
    holes: Optional[List[int]] = None  # each row's count

    def _arrays(self) -> List[mx.array]:
        return (
            list(self.keys) + list(self.values) if isinstance(self.keys, tuple) else [self.keys, self.values]
        )

    def _set_arrays(self, arrays: List[mx.array]) -> None:
        if isinstance(self.keys, tuple):
            self.keys, self.values = tuple(arrays[:3]), tuple(arrays[3:])
        else:
            self.keys, self.values = arrays

    def _rows(self) -> int:
        return self.offset.shape[0]

    def _recount(self) -> None:
        self.holes = (~self.valid).sum(axis=1).tolist() if self.valid is not None else None
        if not self.holes or not any(self.holes):
            self.valid, self.holes = None, None

    def punch(self, extra: Sequence[int]) -> None:
        """Make the newest ``extra[i]`` positions of row i holes (its RoPE offset back by as many)."""
        n, rows = self._idx, self._rows()
        cut = mx.array([n - e for e in extra])
        self.valid = _widen(self.valid, rows, n) & (mx.arange(n)[None] < cut[:, None])
        self.offset = self.offset - mx.array(list(extra))
        self.holes = [h + e for h, e in zip(self.holes or [0] * rows, extra)]
        if max(self.holes) > max(COMPACT_LEAST, n // COMPACT_FRACTION):
            self.compact()

    def compact(self) -> None:
        """Every row's holes moved into its left padding (one gather of each buffer)."""
        if self.valid is None:
            return
        n = self._idx
        valid = np.array(_widen(self.valid, self._rows(), n))
        size = self._arrays()[0].shape[2]
        index = np.tile(np.arange(size, dtype=np.int32), (valid.shape[0], 1))
        for row, (keep, holes) in enumerate(zip(valid, self.holes)):
            index[row, :holes] = 0  # new left padding: any position, masked
            index[row, holes:n] = np.nonzero(keep)[0]
        index = mx.array(index)[:, None, :, None]
        self._set_arrays([mx.take_along_axis(a, index, axis=2) for a in self._arrays()])
        self.left_padding = self.left_padding + mx.array(self.holes)
        self.valid, self.holes = None, None

    def make_mask(self, N: int, return_array: bool = False, **kwargs):
        mask = super().make_mask(N, return_array=return_array, **kwargs)
        if self.valid is None:
            return mask
        valid = _widen(self.valid, self._rows(), self._idx + N)[:, None, None, :]
        return mask & valid

    def trim(self, n):
        n = super().trim(n)
        if self.valid is not None and self.valid.shape[1] > self._idx:
            self.valid = self.valid[:, : self._idx]
            self._recount()
        return n

    def finalize(self):
        if self._right_padding is not None:
            self.compact()
        super().finalize()

    def filter(self, batch_indices):
        if self.valid is None:
            return super().filter(batch_indices)
        keep = batch_indices.tolist() if isinstance(batch_indices, mx.array) else list(batch_indices)
        padding = self.left_padding.tolist()
        least = min(padding[i] for i in keep)
        super().filter(batch_indices)
        self.valid = self.valid[mx.array(keep)][:, least:]
        self.holes = [self.holes[i] for i in keep]
        if not any(self.holes):
            self.valid, self.holes = None, None

    def extend(self, other):
        theirs = getattr(other, "valid", None)
        if self.valid is None and theirs is None:
            return super().extend(other)
        mine_n, theirs_n = self._idx, other._idx
        mine_rows, theirs_rows = self._rows(), other.offset.shape[0]
        mine_holes = self.holes or [0] * mine_rows
        theirs_holes = getattr(other, "holes", None) or [0] * theirs_rows
        super().extend(other)
        n = self._idx  # both right-justified at the longer one's width
        parts = []
        for valid, rows, width in ((self.valid, mine_rows, mine_n), (theirs, theirs_rows, theirs_n)):
            parts.append(_widen(None, rows, n - width))
            parts[-1] = mx.concatenate([parts[-1], _widen(valid, rows, width)], axis=1)
        self.valid = mx.concatenate(parts, axis=0)
        self.holes = mine_holes + theirs_holes

    def extract(self, idx):
        if self.valid is None or not self.holes[idx]:
            return super().extract(idx)
        padding = self.left_padding.tolist()[idx]
        valid = np.array(_widen(self.valid[idx : idx + 1], 1, self._idx))[0]
        positions = mx.array(padding + np.nonzero(valid[padding:])[0].astype(np.int32))
        arrays = [mx.contiguous(mx.take(a[idx : idx + 1], positions, axis=2)) for a in self._arrays()]
        return self._single(arrays)


class HoledBatchKVCache(Holes, BatchKVCache):
    def _single(self, arrays: List[mx.array]) -> KVCache:
        cache = KVCache()
        cache.keys, cache.values = arrays
        cache.offset = arrays[0].shape[2]
        return cache


class HoledBatchQuantizedKVCache(Holes, BatchQuantizedKVCache):
    def _single(self, arrays: List[mx.array]) -> QuantizedKV:
        cache = QuantizedKV(self.group_size, self.bits)
        cache.set_arrays(tuple(arrays), arrays[0].shape[2])
        return cache


HOLED = {BatchKVCache: HoledBatchKVCache, BatchQuantizedKVCache: HoledBatchQuantizedKVCache}


def punch(c, extra: Sequence[int]) -> None:
    """Make the newest ``extra[i]`` positions of row i of a full-attention batch cache holes
    (``Holes.punch``); the cache becomes its holed class on its first holes."""
    if not isinstance(c, Holes):
        c.__class__ = HOLED[type(c)]
    c.punch(extra)
