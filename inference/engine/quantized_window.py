"""Quantized KV for sliding-window layers: mlx-lm's rotating caches over quantized triples.

With ``kv_bits`` a sliding-window layer keeps its keys and values as MLX quantized triples
(packed uint32 data, scales, biases), as a full-attention layer does (quantized_kv.py): the new
tokens of every forward pass are quantized before they enter the window, and attention runs
through mlx-lm's quantized attention (its ``scaled_dot_product_attention`` takes that path for a
cache with ``bits``). Quantization works per token, so what the window holds is the same whether
its tokens were quantized one by one or in chunks.

The window is mlx-lm's own. ``QuantizedWindowKV`` (one sequence) holds three mlx-lm
``RotatingKVCache``s and ``BatchQuantizedWindowKV`` (the decode batch, batched prefill) three
``BatchRotatingKVCache``s, one per component of the triple, each keeping that component of the
keys and of the values. Every operation (append, trim to the window, rotation, left padding,
a batched prefill's right padding, merge, extend, filter, extract, trim) is applied to the three
alike, so they stay in lockstep: the same columns, offsets and padding. The invariant: the three
caches have equal bookkeeping (``offset``, ``_idx``, padding, rotation) and their arrays equal
widths on the token axis (2); the mask and the positions (RoPE offset) come from the first.
"""

from __future__ import annotations

from typing import List

import mlx.core as mx
from mlx_lm.models.cache import BatchRotatingKVCache, RotatingKVCache

PARTS = 3  # packed data, scales, biases


class _Lockstep:
    """What both classes share: three mlx-lm caches driven alike (see the module docstring)."""

    parts: tuple
    group_size: int
    bits: int

    def update_and_fetch(self, keys, values):
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        out = [p.update_and_fetch(k, v) for p, k, v in zip(self.parts, qk, qv)]
        return tuple(k for k, _ in out), tuple(v for _, v in out)

    @property
    def offset(self):
        return self.parts[0].offset

    @property
    def max_size(self) -> int:
        return self.parts[0].max_size

    @property
    def keys(self):
        return None if self.empty() else tuple(p.keys for p in self.parts)

    @property
    def values(self):
        return None if self.empty() else tuple(p.values for p in self.parts)

    def make_mask(self, *args, **kwargs):
        return self.parts[0].make_mask(*args, **kwargs)

    def size(self) -> int:
        return self.parts[0].size()

    def empty(self) -> bool:
        return self.parts[0].keys is None

    def is_trimmable(self) -> bool:
        return self.parts[0].is_trimmable()

    def trim(self, n: int) -> int:
        return [p.trim(n) for p in self.parts][0]

    @property
    def state(self):
        return tuple(p.state for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


class QuantizedWindowKV(_Lockstep):
    """One sequence's sliding-window layer with quantized KV (window ``max_size``)."""

    keep = 0  # no attention-sink tokens: such windows are not split into blocks (cache_io)

    def __init__(self, max_size: int, group_size: int, bits: int):
        self.parts = tuple(RotatingKVCache(max_size) for _ in range(PARTS))
        self.group_size, self.bits = group_size, bits

    @classmethod
    def merge(cls, caches):
        return BatchQuantizedWindowKV.merge(caches)

    def arrays(self) -> tuple:
        """(keys, key scales, key biases, values, value scales, value biases) of the tokens it
        holds, oldest first (the last min(offset, window) tokens, more after a prefill chunk)."""
        keys = tuple(p._temporal_order(p.keys) for p in self.parts)
        return keys + tuple(p._temporal_order(p.values) for p in self.parts)

    def set_arrays(self, arrays, offset: int) -> None:
        """Hold ``arrays`` (as ``arrays()`` gives them) as the last tokens of ``offset``."""
        for p, k, v in zip(self.parts, arrays[:PARTS], arrays[PARTS:]):
            p.keys, p.values, p.offset, p._idx = k, v, offset, k.shape[2]


class BatchQuantizedWindowKV(_Lockstep):
    """Sliding-window layer of a batch (mlx-lm's ``BatchRotatingKVCache``: left padding,
    ``offset`` per row) with quantized KV."""

    def __init__(self, max_size: int, left_padding: List[int], group_size: int, bits: int):
        self.parts = tuple(BatchRotatingKVCache(max_size, left_padding) for _ in range(PARTS))
        self.group_size, self.bits = group_size, bits

    @classmethod
    def _of(cls, parts, group_size: int, bits: int) -> "BatchQuantizedWindowKV":
        cache = cls.__new__(cls)
        cache.parts, cache.group_size, cache.bits = tuple(parts), group_size, bits
        return cache

    @property
    def left_padding(self):
        return self.parts[0].left_padding

    def prepare(self, **kwargs) -> None:
        for p in self.parts:
            p.prepare(**kwargs)

    def finalize(self) -> None:
        for p in self.parts:
            p.finalize()

    def filter(self, batch_indices) -> None:
        for p in self.parts:
            p.filter(batch_indices)

    def extend(self, other: "BatchQuantizedWindowKV") -> None:
        for p, o in zip(self.parts, other.parts):
            p.extend(o)

    def extract(self, idx: int) -> QuantizedWindowKV:
        cache = QuantizedWindowKV(self.max_size, self.group_size, self.bits)
        cache.parts = tuple(p.extract(idx) for p in self.parts)
        return cache

    @classmethod
    def merge(cls, caches) -> "BatchQuantizedWindowKV":
        first = caches[0]
        parts = [BatchRotatingKVCache.merge([c.parts[j] for c in caches]) for j in range(PARTS)]
        return cls._of(parts, first.group_size, first.bits)
