"""Attention for grouped-query models on MLX's CPU backend.

MLX has no CPU kernel for ``mx.fast.scaled_dot_product_attention``: on the CPU it composes the
attention from plain operations, and for a model whose query heads share key/value heads (every
GQA model: a Qwen2.5-0.5B has 14 query heads over 2) it makes the repeat a batch dimension, so a
decode step becomes one small matrix-vector product per query head instead of one matrix
product per key/value head. At the context lengths of an agent's conversation that is most of a
decode step's time: measured here (2 cores, OpenBLAS, side by side), one layer of a 0.5B model
over 4 rows x 2,048 tokens takes about 0.6x the fast path's time as below.

``attention`` folds each key/value head's query heads (and, in a prefill, their positions) into
the rows of one product: queries [B, H, L, D] -> [B, KV, H/KV x L, D] against keys
[B, KV, Lk, D], the mask applied as the fast path applies it (a boolean mask keeps the smallest
finite value where it is False; any other mask is added; ``"causal"`` aligns the queries to the
last keys), softmax in float32 precision, the same product with the values. Same operations,
grouped differently: the outputs agree with the fast path to rounding.

mlx-lm's models call ``mlx_lm.models.base.scaled_dot_product_attention`` through a name bound in
their own module; ``install`` rebinds that name, for the modules of one loaded model, to a router
that takes this path on the threads that asked for it (``enable_on_this_thread``: the engine's
thread, after ``agrees`` passed on that model) and mlx-lm's own function everywhere else (another
engine's thread, a benchmark's bare mlx-lm in the same process), and always for a quantized KV
cache or attention sinks (there through sink_attention's function: mlx-lm's, or quantized KV with
sinks). On a GPU (Metal, CUDA) nothing is installed: the fast kernel is the
right one there.

Large tensors of the softmax here, and of the model's SwiGLU (the same router rebinds mlx-lm's
``swiglu`` in the model's modules), go through NumPy: MLX's CPU ``exp`` is scalar code, and in
a prompt's pass these two cost more than the matrix products around them (``cpu_numpy``).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base
from mlx_lm.models.cache import make_prompt_cache

from . import cpu_numpy, sink_attention

logger = logging.getLogger("omlx.engine")

_local = threading.local()
_ORIGINAL = base.scaled_dot_product_attention


def attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask=None) -> mx.array:
    """softmax(Q K^T * scale + mask) V for queries [B, H, L, D] and keys/values [B, KV, Lk, D]
    (H a multiple of KV); ``mask``: None, ``"causal"``, or an array broadcastable to
    [B, H, L, Lk] (boolean: where to attend; otherwise added to the scores)."""
    B, H, L, D = queries.shape
    KV, Lk = keys.shape[1], keys.shape[2]
    R = H // KV
    q = (queries * mx.array(scale, dtype=queries.dtype)).reshape(B, KV, R * L, D)
    scores = q @ keys.swapaxes(-1, -2)  # [B, KV, R x L, Lk]
    if mask is not None:
        scores = scores.reshape(B, KV, R, L, Lk)
        if isinstance(mask, str):
            if mask != "causal":
                raise ValueError(f"unknown attention mask {mask!r}")
            mask = (mx.arange(L)[:, None] + (Lk - L)) >= mx.arange(Lk)[None, :]
        else:
            mask = _grouped(mask, KV, R)
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, mx.array(mx.finfo(scores.dtype).min, scores.dtype))
        else:
            scores = scores + mask
        scores = scores.reshape(B, KV, R * L, Lk)
    weights = cpu_numpy.softmax(scores)  # NumPy's for large tensors: MLX's CPU exp is scalar
    return (weights @ values).reshape(B, H, L, values.shape[-1])


def _grouped(mask: mx.array, kv_heads: int, repeats: int) -> mx.array:
    """A mask broadcastable to [B, H, L, Lk] as one broadcastable to [B, KV, H/KV, L, Lk]."""
    while mask.ndim < 4:
        mask = mask[None]
    if mask.shape[1] == 1:
        return mask[:, :, None]
    return mask.reshape(mask.shape[0], kv_heads, repeats, *mask.shape[2:])


def _routed(queries, keys, values, cache, scale, mask, sinks=None):
    if sinks is None and getattr(_local, "on", False) and not hasattr(cache, "bits"):
        return attention(queries, keys, values, scale, mask)
    return sink_attention.scaled_dot_product_attention(
        queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks
    )


def _routed_swiglu(gate, x):
    if getattr(_local, "on", False):
        return cpu_numpy.swiglu(gate, x)
    return cpu_numpy._ORIGINAL_SWIGLU(gate, x)


def install(model: nn.Module) -> bool:
    """Route the attention of ``model``'s modules through ``_routed`` (rebinding the name their
    modules import from mlx-lm's base), and their SwiGLU (mlx-lm's ``activations.swiglu``)
    through ``_routed_swiglu``. False, and nothing changed, off the CPU or when no module of the
    model calls mlx-lm's attention function."""
    if mx.default_device() != mx.cpu:
        return False
    routed = False
    for _, module in model.named_modules():
        owner = sys.modules.get(type(module).__module__)
        bound = getattr(owner, "scaled_dot_product_attention", None)
        if bound in (_ORIGINAL, sink_attention.scaled_dot_product_attention):
            owner.scaled_dot_product_attention = _routed
        routed = routed or bound in (_ORIGINAL, _routed)
    if routed:  # never in mlx-lm's activations module itself (a model using one of its classes,
        for _, module in model.named_modules():  # gpt-oss's SwigluOAI): every user would see it
            owner = sys.modules.get(type(module).__module__)
            if owner is not activations and getattr(owner, "swiglu", None) is cpu_numpy._ORIGINAL_SWIGLU:
                owner.swiglu = _routed_swiglu
    return routed


def enable_on_this_thread(on: bool = True) -> None:
    _local.on = on


def enabled_on_this_thread() -> bool:
    return getattr(_local, "on", False)


def _probe(model: nn.Module) -> mx.array:
    """Logits of a probe run the way the engine runs a model: two prompts of different lengths,
    each prefilled alone (a causal mask), then one decode step of both in batch caches merged as
    the decode batch merges them (the shorter row left-padded: a mask array)."""
    rows = [[1, 2, 3, 4, 5], [6, 7, 8]]
    caches, last = [], []
    for row in rows:
        cache = make_prompt_cache(model)
        last.append(model(mx.array([row]), cache=cache)[0, -1])
        caches.append(cache)
    batch = [type(layer[0]).merge(list(layer)) for layer in zip(*caches)]
    step = model(mx.array([[row[-1]] for row in rows]), cache=batch)[:, -1]
    return mx.concatenate([mx.stack(last), step]).astype(mx.float32)


def agrees(model: nn.Module) -> bool:
    """Whether ``model``'s logits through this path match mlx-lm's own on ``_probe``. Run on the
    thread that will use it; leaves that thread's setting as it found it."""
    before = enabled_on_this_thread()
    out = {}
    try:
        for on in (False, True):
            enable_on_this_thread(on)
            out[on] = _probe(model)
    finally:
        enable_on_this_thread(before)
    want, got = out[False], out[True]
    scale = mx.max(mx.abs(want)).item() or 1.0
    return mx.max(mx.abs(want - got)).item() <= 1e-3 * scale


def setup(model: nn.Module) -> Optional[bool]:
    """Install and check on the calling (engine) thread: True when the path is on for it, False
    when it did not match mlx-lm (logged; mlx-lm's own attention is used), None when it does not
    apply (a GPU, or a model that does not call mlx-lm's attention)."""
    if not install(model):
        return None
    try:
        ok = agrees(model)
    except Exception:  # a model this path does not fit: mlx-lm's own attention
        logger.exception("CPU attention check failed")
        ok = False
    if not ok:
        logger.info("CPU attention off for %s: its outputs differ from mlx-lm's", type(model).__module__)
    enable_on_this_thread(ok)
    return ok
