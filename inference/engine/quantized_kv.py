"""Quantized KV for full-attention layers: a request's cache and the decode batch's cache.

With ``kv_bits`` (8 or 4) every full-attention layer keeps its keys and values as MLX quantized
triples (packed uint32 data, scales, biases; ``mx.quantize`` over groups of ``kv_group_size``
channels of each token's head vector), from the first token on: every forward pass quantizes the
keys and values of its new tokens before attention, and attention runs through mlx-lm's
``quantized_scaled_dot_product_attention`` (mlx-lm's attention takes that path for any cache that
has ``bits``). So a prefix computed here and the same prefix restored from the block cache are
the same arrays, and a request computes what mlx-lm's ``generate`` computes over a
``QuantizedKVCache`` of the same bits. (mlx-lm's default cache attends the first prefill chunk
in float and quantizes after it; a prefix cache cannot: its blocks would then depend on how the
prompt was chunked.)

Sliding-window layers quantize the same way (``QuantizedWindowKV``: mlx-lm's rotating window
over quantized triples, quantized_window.py); recurrent states stay in the model's dtype.
Quantization works per token, so quantizing a chunk equals quantizing its tokens one by one:
chunking, batching and preemption do not change a stored value.

``QuantizedKV`` is one sequence's cache (mlx-lm's ``QuantizedKVCache`` that merges into a batch);
``BatchQuantizedKVCache`` is mlx-lm's left-padded ``BatchKVCache`` with each of keys and values a
triple: update, prepare/finalize (right padding of a batched prefill, and a speculative verify
pass's per-row rollback: speculative/rollback.py), trim, merge, extend, filter and extract act on
all three arrays alike (tokens are axis 2 of each).
"""

from __future__ import annotations

from typing import List, Optional

import mlx.core as mx
from mlx_lm.models.cache import (
    BatchKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    dynamic_roll,
    make_prompt_cache,
)

from .kv_quant import KVQuant
from .quantized_window import QuantizedWindowKV


def make_cache(model, quant: Optional[KVQuant]) -> list:
    """mlx-lm's caches for ``model``, with every full-attention ``KVCache`` a ``QuantizedKV`` and
    every sliding-window ``RotatingKVCache`` (without sink tokens) a ``QuantizedWindowKV``."""
    caches = make_prompt_cache(model)
    if quant is None:
        return caches
    return [_quantized(c, quant) for c in caches]


def _quantized(cache, quant: KVQuant):
    if type(cache) is KVCache:
        return QuantizedKV(quant.group_size, quant.bits)
    if type(cache) is RotatingKVCache and cache.keep == 0:
        return QuantizedWindowKV(cache.max_size, quant.group_size, quant.bits)
    if hasattr(cache, "caches"):  # a CacheList
        cache.caches = tuple(_quantized(c, quant) for c in cache.caches)
    return cache


def _slice(triple, lo=None, hi=None) -> tuple:
    return tuple(a[..., lo:hi, :] for a in triple)


class QuantizedKV(QuantizedKVCache):
    """One sequence's quantized KV (mlx-lm's ``QuantizedKVCache``) that joins a batch."""

    def size(self) -> int:
        return self.offset

    @classmethod
    def merge(cls, caches):
        return BatchQuantizedKVCache.merge(caches)

    def arrays(self) -> tuple:
        """(keys, key scales, key biases, values, value scales, value biases) of its tokens."""
        return _slice(self.keys, None, self.offset) + _slice(self.values, None, self.offset)

    def set_arrays(self, arrays, offset: int) -> None:
        self.keys, self.values = tuple(arrays[:3]), tuple(arrays[3:])
        self.offset = offset


class BatchQuantizedKVCache(BatchKVCache):
    """mlx-lm's ``BatchKVCache`` (left padding, ``offset`` per row, ``_idx`` the filled width)
    with keys and values held as quantized triples."""

    def __init__(self, left_padding: List[int], group_size: int, bits: int):
        super().__init__(left_padding)
        self.group_size, self.bits = group_size, bits

    def update_and_fetch(self, keys, values):
        prev, n = self._idx, keys.shape[2]
        if self.keys is None or prev + n > self.keys[0].shape[2]:
            steps = (self.step + n - 1) // self.step * self.step
            B, H = keys.shape[:2]
            per_int = 32 // self.bits

            def empty(dim):
                return (
                    mx.zeros((B, H, steps, dim // per_int), dtype=mx.uint32),
                    mx.zeros((B, H, steps, dim // self.group_size), dtype=keys.dtype),
                    mx.zeros((B, H, steps, dim // self.group_size), dtype=keys.dtype),
                )

            new_k, new_v = empty(keys.shape[3]), empty(values.shape[3])
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                self.keys = tuple(
                    mx.concatenate([a[..., :prev, :], b], axis=2) for a, b in zip(self.keys, new_k)
                )
                self.values = tuple(
                    mx.concatenate([a[..., :prev, :], b], axis=2) for a, b in zip(self.values, new_v)
                )
        self.offset = self.offset + n
        self._idx += n
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        for buf, new in ((self.keys, qk), (self.values, qv)):
            for a, b in zip(buf, new):
                a[..., prev : self._idx, :] = b
        return self.keys_and_values()

    def keys_and_values(self):
        return _slice(self.keys, None, self._idx), _slice(self.values, None, self._idx)

    def finalize(self):
        if self._right_padding is not None:
            shift = self._right_padding[:, None]
            self.keys = tuple(dynamic_roll(a, shift, axis=2) for a in self.keys)
            self.values = tuple(dynamic_roll(a, shift, axis=2) for a in self.values)
            self.offset = self.offset - self._right_padding
            self.left_padding += self._right_padding
            self._right_padding = None

    @property
    def state(self):
        return self.keys, self.values, self.offset, self.left_padding

    def filter(self, batch_indices):
        if self.keys is not None:
            self.keys = tuple(a[batch_indices] for a in self.keys)
            self.values = tuple(a[batch_indices] for a in self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        least = min(self.left_padding.tolist())
        if least > 0:  # drop the columns that are padding in every row left
            if self.keys is not None:
                self.keys, self.values = _slice(self.keys, least), _slice(self.values, least)
            self._idx -= least
            self.left_padding -= least

    def extend(self, other):
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        width = max(self._idx, other._idx)
        like = self if self.keys is not None else other

        def padded(c):
            """c's six arrays right-justified at ``width`` (columns beyond ``_idx`` dropped)."""
            rows = c.offset.shape[0]
            if c.keys is None:
                arrays = tuple(mx.zeros((rows, *a.shape[1:2], 0, a.shape[3]), a.dtype) for a in like.arrays6)
            else:
                arrays = tuple(a[..., : c._idx, :] for a in c.arrays6)
            left = width - c._idx
            if left:
                arrays = tuple(mx.pad(a, [(0, 0), (0, 0), (left, 0), (0, 0)]) for a in arrays)
            return arrays, c.offset, c.left_padding + left

        (a6, off_a, lp_a), (b6, off_b, lp_b) = padded(self), padded(other)
        joined = tuple(mx.concatenate([a, b]) for a, b in zip(a6, b6))
        self.keys, self.values = joined[:3], joined[3:]
        self.offset = mx.concatenate([off_a, off_b])
        self.left_padding = mx.concatenate([lp_a, lp_b])
        self._idx = width

    @property
    def arrays6(self) -> tuple:
        return tuple(self.keys) + tuple(self.values)

    def extract(self, idx) -> QuantizedKV:
        cache = QuantizedKV(self.group_size, self.bits)
        padding = self.left_padding.tolist()[idx]
        arrays = tuple(mx.contiguous(a[idx : idx + 1, :, padding : self._idx]) for a in self.arrays6)
        cache.set_arrays(arrays, self._idx - padding)
        return cache

    @classmethod
    def merge(cls, caches):
        lengths = [c.size() for c in caches]
        width = max(lengths)
        first = caches[0]
        if width == 0:
            return cls([0] * len(caches), first.group_size, first.bits)
        like = next(c for c in caches if c.keys is not None)
        shapes = [a.shape for a in like.arrays()]
        out = tuple(
            mx.zeros((len(caches), s[1], width, s[3]), a.dtype) for s, a in zip(shapes, like.arrays())
        )
        for i, c in enumerate(caches):
            if c.keys is None or not c.offset:
                continue
            p = width - c.offset
            for dst, src in zip(out, c.arrays()):
                dst[i : i + 1, :, p:] = src
        cache = cls([width - n for n in lengths], first.group_size, first.bits)
        cache.keys, cache.values = out[:3], out[3:]
        cache.offset += width
        cache._idx = width
        return cache

    @property
    def nbytes(self):
        return 0 if self.keys is None else sum(a.nbytes for a in self.arrays6)
