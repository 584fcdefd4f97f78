"""Attention over quantized KV with attention sinks (gpt-oss), which mlx-lm's refuses.

A model with attention sinks (gpt-oss) has one learned logit per query head that joins every
softmax as one more column with no value behind it: it takes a share of the attention weight and
gives back nothing, so a head can attend to "nothing" (mx.fast.scaled_dot_product_attention's
``sinks``). mlx-lm's quantized attention (``quantized_scaled_dot_product_attention``, which its
``scaled_dot_product_attention`` takes for a cache with ``bits``) has no sinks and raises
ValueError, so such a model could not run with ``kv_bits``.

``quantized_attention`` is the same computation as mlx-lm's (scores by ``mx.quantized_matmul``
of the scaled queries against the packed keys, the mask applied the same way, softmax in float32
precision, the weights by ``mx.quantized_matmul`` against the packed values) with the sink logit
of each head joined to the softmax as MLX's own attention joins it: a column in front of the
masked scores, left out of the product with the values. Nothing is dequantized.

``install`` rebinds, in the modules of one loaded model, the name ``scaled_dot_product_attention``
they import from mlx-lm's base to ``scaled_dot_product_attention`` here: this path for a cache
with ``bits`` and sinks, mlx-lm's own function for everything else (so the rebinding changes
nothing where mlx-lm works, for any thread or engine). cpu_attention's router falls back to it.
"""

from __future__ import annotations

import sys
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import base

_MLX = base.scaled_dot_product_attention


def quantized_attention(
    queries: mx.array,
    q_keys: tuple,
    q_values: tuple,
    scale: float,
    mask,
    group_size: int,
    bits: int,
    sinks: Optional[mx.array] = None,
) -> mx.array:
    """softmax([sink | Q K^T * scale + mask]) V without the sink column, for queries
    [B, H, L, D] and keys/values as quantized triples over [B, KV, Lk, D] (H a multiple of KV);
    ``sinks``: [H] logits (None: mlx-lm's quantized attention); ``mask``: None, ``"causal"`` or
    an array (boolean: where to attend; otherwise added)."""
    B, H, L, D = queries.shape
    KV = q_keys[0].shape[-3]
    R = H // KV
    queries = queries * scale
    if R > 1:
        queries = queries.reshape(B, KV, R, L, D)
        q_keys = tuple(mx.expand_dims(a, -3) for a in q_keys)
        q_values = tuple(mx.expand_dims(a, -3) for a in q_values)
    scores = mx.quantized_matmul(queries, *q_keys, transpose=True, group_size=group_size, bits=bits)
    if mask is not None:
        if isinstance(mask, str):
            if mask != "causal":
                raise ValueError(f"unknown attention mask {mask!r}")
            qL, kL = scores.shape[-2:]
            mask = mx.arange(kL - qL, kL)[:, None] >= mx.arange(kL)[None]
        elif R > 1 and mask.ndim > 3:
            mask = mx.expand_dims(mask, -3)
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    if sinks is not None:
        column = sinks.astype(scores.dtype).reshape((KV, R, 1, 1) if R > 1 else (H, 1, 1))
        column = mx.broadcast_to(column, scores.shape[:-1] + (1,))
        scores = mx.concatenate([column, scores], axis=-1)
    weights = mx.softmax(scores, axis=-1, precise=True)
    if sinks is not None:
        weights = weights[..., 1:]
    out = mx.quantized_matmul(weights, *q_values, transpose=False, group_size=group_size, bits=bits)
    return out.reshape(B, H, L, -1) if R > 1 else out


def scaled_dot_product_attention(queries, keys, values, cache, scale: float, mask, sinks=None):
    """mlx-lm's ``scaled_dot_product_attention``, and ``quantized_attention`` where it raises
    (a quantized cache with sinks)."""
    if sinks is not None and hasattr(cache, "bits"):
        return quantized_attention(
            queries, keys, values, scale, mask, group_size=cache.group_size, bits=cache.bits, sinks=sinks
        )
    return _MLX(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)


def install(model: nn.Module) -> bool:
    """Rebind mlx-lm's attention in ``model``'s modules to ``scaled_dot_product_attention``
    (see the module docstring); True when it rebound some module's."""
    installed = False
    for _, module in model.named_modules():
        owner = sys.modules.get(type(module).__module__)
        if getattr(owner, "scaled_dot_product_attention", None) is _MLX:
            owner.scaled_dot_product_attention = scaled_dot_product_attention
            installed = True
    return installed
