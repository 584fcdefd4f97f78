"""A float model's SSD tier kept quantized (``--paged-ssd-cache-bits``): blocks are quantized on
their way to disk and dequantized when read back.

The RAM tier and the running batch keep the model's float KV; only the files change, to the
format of a quantized model's blocks (cache/layout.py: six arrays per attention layer, full or
sliding; state layers as they are). A restored block is close to what was stored, not equal
(8 bits: about 1/256 of each group's range; docs/benchmarks.md): the user trades that for 3.5x
(8 bits) or 6x (4 bits) fewer bytes per float32 token on disk, read that much faster. The format
is part of the model fingerprint (inference/engine/engine_cache.py), so an engine that keeps its
SSD tier in float never reads these blocks, nor they its.
"""

from __future__ import annotations

from typing import List

import mlx.core as mx

from .layout import STATE, parse_kv


class ColdQuantizer:
    """Quantizes the attention layers (full and sliding) of a block's payload to ``kv`` (``q<bits>g<group>``)
    and back; ``kinds`` are the layers' (kind, count) as the block files name them."""

    def __init__(self, kv: str):
        parsed = parse_kv(kv)
        if parsed is None:
            raise ValueError(f"bad KV format {kv!r}")
        self.kv = kv
        self.bits, self.group_size = parsed

    def encode(self, layers: List[tuple], kinds) -> List[tuple]:
        out = []
        for (kind, _), layer in zip(kinds, layers):
            if kind != STATE:
                k, v = layer
                layer = (*self._quantize(k), *self._quantize(v))
            out.append(layer)
        return out

    def decode(self, layers: List[tuple], kinds, dtype: str) -> List[tuple]:
        target = getattr(mx, dtype)
        out = []
        for (kind, _), layer in zip(kinds, layers):
            if kind != STATE:
                layer = (self._dequantize(layer[:3], target), self._dequantize(layer[3:], target))
            out.append(layer)
        return out

    def _quantize(self, a: mx.array) -> tuple:
        return tuple(mx.quantize(a, group_size=self.group_size, bits=self.bits))

    def _dequantize(self, triple, dtype) -> mx.array:
        data, scales, biases = triple
        return mx.dequantize(data, scales, biases, group_size=self.group_size, bits=self.bits).astype(dtype)
