"""Between mlx-lm's layer caches and the block cache's plain arrays (cache/layout.py).

mlx-lm gives every model a list of layer caches, some of them ``CacheList``s of several; omlx
works on the flattened list of leaves. Three kinds of leaf split into blocks: ``KVCache`` or
``QuantizedKV`` (full attention, float or quantized: inference/engine/quantized_kv.py),
``RotatingKVCache`` without kept sink tokens or ``QuantizedWindowKV`` (sliding window, float or
quantized: inference/engine/quantized_window.py) and ``ArraysCache`` (recurrent state). A model
with any other leaf (chunked attention, sinks) runs without the prefix cache.

An attention layer crosses into cache/ as a tuple of arrays with the tokens on axis 2: (keys,
values) for float KV, (keys, key scales, key biases, values, value scales, value biases) for
quantized KV (the packed uint32 data and its groups' scales and biases, as ``mx.quantize``
makes them).
"""

from __future__ import annotations

from typing import List, Optional

import mlx.core as mx
from mlx_lm.models.cache import (
    ArraysCache,
    BatchKVCache,
    CacheList,
    KVCache,
    RotatingKVCache,
)

from cache.layout import FULL, SLIDING, STATE, CacheLayout, LayerSpec, mixed_layout, plain_layout, quantized
from cache.prefix_cache import KVSnapshot

from .quantized_kv import BatchQuantizedKVCache, QuantizedKV
from .quantized_window import BatchQuantizedWindowKV, QuantizedWindowKV

QUANTIZED = (QuantizedKV, QuantizedWindowKV)


def leaves(caches) -> list:
    """The leaf caches of a model's cache list, in order (``CacheList``s flattened)."""
    out = []
    for c in caches:
        if isinstance(c, CacheList):
            out.extend(leaves(c.caches))
        else:
            out.append(c)
    return out


def layout_of(caches) -> Optional[CacheLayout]:
    """The layout of a model's caches after a forward pass (so that every leaf holds arrays),
    or None when some leaf cannot be split into blocks."""
    specs, quant = [], None
    for c in leaves(caches):
        if type(c) is KVCache:
            specs.append((LayerSpec(FULL), _heads(c)))
        elif type(c) is QuantizedKV:
            specs.append((LayerSpec(FULL), _heads(c)))
            quant = f"q{c.bits}g{c.group_size}"
        elif type(c) is RotatingKVCache and c.keep == 0:
            specs.append((LayerSpec(SLIDING, window=c.max_size), _heads(c)))
        elif type(c) is QuantizedWindowKV:
            specs.append((LayerSpec(SLIDING, window=c.max_size), _heads(c)))
            quant = f"q{c.bits}g{c.group_size}"
        elif type(c) is ArraysCache and all(a is not None for a in c.cache):
            shapes = tuple(tuple(a.shape[1:]) for a in c.cache)
            text = "|".join(
                f"{str(a.dtype).rsplit('.', 1)[-1]}[{'x'.join(map(str, a.shape[1:]))}]" for a in c.cache
            )
            specs.append((LayerSpec(STATE, shapes=shapes), text))
        else:
            return None
    if all(spec.kind == FULL for spec, _ in specs):
        layout = plain_layout(len(specs), *_dims(leaves(caches)[0]))
    else:
        layout = mixed_layout(specs)
    return quantized(layout, quant) if quant else layout


def _dims(c) -> tuple:
    """(kv heads, key dim, value dim) of an attention cache, float or quantized."""
    if isinstance(c, QUANTIZED):
        return c.keys[1].shape[1], c.keys[1].shape[3] * c.group_size, c.values[1].shape[3] * c.group_size
    return c.keys.shape[1], c.keys.shape[3], c.values.shape[3]


def attention_dims(caches) -> set:
    """The key and value dims of the attention layers that split into blocks, full and sliding
    (after a forward pass): quantized KV quantizes them all."""
    kinds = (KVCache, QuantizedKV, QuantizedWindowKV)
    return {
        d
        for c in leaves(caches)
        if type(c) in kinds or (type(c) is RotatingKVCache and c.keep == 0)
        for d in _dims(c)[1:]
    }


def _heads(c) -> str:
    return "x".join(map(str, _dims(c)))


def snapshot(caches, end: int) -> KVSnapshot:
    """What a single sequence's caches (not batched) hold after computing ``end`` tokens."""
    layers = []
    for c in leaves(caches):
        if type(c) is KVCache:
            layers.append((c.keys[..., : c.offset, :], c.values[..., : c.offset, :], 0))
        elif type(c) is QuantizedKV:
            layers.append((*c.arrays(), 0))
        elif type(c) is RotatingKVCache:
            keys, values = c._temporal_order(c.keys), c._temporal_order(c.values)
            layers.append((keys, values, c.offset - keys.shape[2]))
        elif type(c) is QuantizedWindowKV:
            arrays = c.arrays()
            layers.append((*arrays, c.offset - arrays[0].shape[2]))
        else:
            layers.append(tuple(c.cache))
    return KVSnapshot(end, layers)


def batch_snapshot(batch_caches, row: int, end: int, full: bool = True) -> KVSnapshot:
    """What row ``row`` of a decode batch's caches holds after ``end`` tokens; with ``full``
    False the full-attention layers are left out (None): a snapshot at a block boundary
    needs only what the end of the sequence will no longer have."""
    layers = []
    for bc in leaves(batch_caches):
        if isinstance(bc, BatchKVCache) and not full:
            layers.append(None)
        elif isinstance(bc, ArraysCache):
            layers.append(tuple(a[row : row + 1] for a in bc.cache))
        elif isinstance(bc, BatchQuantizedKVCache):
            layers.append((*bc.extract(row).arrays(), 0))
        elif isinstance(bc, BatchQuantizedWindowKV):
            arrays = bc.extract(row).arrays()
            layers.append((*arrays, end - arrays[0].shape[2]))
        else:  # BatchKVCache, BatchRotatingKVCache: one row, in temporal order, unpadded
            c = bc.extract(row)
            first = 0 if isinstance(bc, BatchKVCache) else end - c.keys.shape[2]
            layers.append((c.keys, c.values, first))
    return KVSnapshot(end, layers)


def seed(caches, layers: List[tuple], end: int) -> None:
    """Fill a fresh (single sequence) cache list with a prefix hit of ``end`` tokens."""
    for c, layer in zip(leaves(caches), layers):
        if type(c) is KVCache:
            c.keys, c.values = layer
            c.offset = end
        elif type(c) is QuantizedKV:
            c.set_arrays(layer, end)
        elif type(c) is RotatingKVCache:
            # The hit holds the last min(end, window) tokens in order: the state a prefill of
            # ``end`` tokens leaves after its next step trims to the window.
            c.keys, c.values = layer
            c.offset = end
            c._idx = c.keys.shape[2]
        elif type(c) is QuantizedWindowKV:
            c.set_arrays(layer, end)
        else:
            c.cache = list(layer)


def merge_rows(caches: list, room: int = KVCache.step):
    """One layer's row caches as one batch cache, as ``type(caches[0]).merge`` makes it; rows of
    plain ``KVCache``s get ``room`` free positions after the newest. mlx-lm's merge makes a buffer
    exactly as long as the longest row, so the batch's first step after a join (a decode step, or
    a verify pass the policy then prices) grew it: a copy of every row's KV in every layer (a
    3K-token row of SmolLM2: a verify pass measured at 3 plain steps where later ones cost 1.3 to
    1.6). With the room, that step writes into it; the buffer is as long as the grow would have
    made it (mlx-lm grows by ``KVCache.step``)."""
    if room <= 0 or any(type(c) is not KVCache or c.keys is None for c in caches):
        return type(caches[0]).merge(caches)
    kinds = {(*_dims(c), c.keys.dtype, c.values.dtype) for c in caches}
    if len(kinds) != 1:
        return type(caches[0]).merge(caches)
    lengths = [c.size() for c in caches]
    n = max(lengths)
    heads, key_dim, value_dim, key_type, value_type = kinds.pop()
    keys = mx.zeros((len(caches), heads, n + room, key_dim), dtype=key_type)
    values = mx.zeros((len(caches), heads, n + room, value_dim), dtype=value_type)
    for i, (length, c) in enumerate(zip(lengths, caches)):
        keys[i : i + 1, :, n - length : n] = c.keys[..., :length, :]
        values[i : i + 1, :, n - length : n] = c.values[..., :length, :]
    batch = BatchKVCache([n - length for length in lengths])
    batch.keys, batch.values = keys, values
    batch.offset += n
    batch._idx = n
    return batch


def is_batchable(caches) -> bool:
    return all(hasattr(type(c), "merge") for c in caches)


def state_bytes(caches) -> int:
    """Bytes of the recurrent states of one sequence (fixed, whatever its length)."""
    return sum(
        a.nbytes for c in leaves(caches) if isinstance(c, ArraysCache) for a in c.cache if a is not None
    )


def attention_bytes_per_token(caches) -> int:
    """Bytes of keys and values per token over the attention layers (of caches that hold some;
    quantized ones: packed data, scales and biases)."""
    total = 0
    for c in leaves(caches):
        if isinstance(c, ArraysCache) or c.keys is None:
            continue
        arrays = (*c.keys, *c.values) if isinstance(c, QUANTIZED) else (c.keys, c.values)
        total += sum(a.nbytes // a.shape[2] for a in arrays)
    return total


def snapshot_arrays(snapshots: List[KVSnapshot]) -> List[mx.array]:
    return [
        a
        for s in snapshots
        for layer in s.layers
        if layer is not None
        for a in layer
        if isinstance(a, mx.array)
    ]


def materialize(snapshots: List[KVSnapshot]) -> None:
    """Queue the evaluation of snapshot arrays (they are slices of live caches)."""
    arrays = snapshot_arrays(snapshots)
    if arrays:
        mx.async_eval(arrays)
