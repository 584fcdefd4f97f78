"""Softmax and SwiGLU through NumPy for large tensors on MLX's CPU backend.

MLX's CPU ``exp`` (and the ``sigmoid`` built on it) is scalar code: about 13 ns an element on
this project's x86-64 machines, against about 0.5 ns for NumPy's vectorised ``exp``. Measured
there (2 cores, OpenBLAS, one layer of a Qwen2.5-0.5B, a 147-token prompt after 1,200 cached
tokens): the attention's softmax ([1, 2, 1029, 1347] scores) took 36-50 ms of the layer's 43 ms
of attention, more than both of its matrix products, where NumPy takes about 1.4 ms; and
mlx-lm's ``swiglu`` ([1, 147, 4864], compiled) took about 34 ms, where the same through NumPy
takes a few. So in a prompt's forward pass, these two were more than half of the time after the
matrix products.

Both functions here evaluate their inputs (a sync in the middle of the layer's graph) and hand
NumPy's result back as a new MLX array. That sync costs more than it saves on small tensors, so
those stay with MLX's own functions and lazy: a decode step of a few rows over a short context
does not come here; a prefill chunk, a verify pass, a wide or long decode batch does. Results
are computed in float32 and returned in the input's dtype. NumPy's float32 softmax is also
closer to a float64 one than MLX's (3e-7 against 5e-6 to 1e-5, measured).

Only the CPU path uses these (``cpu_attention`` routes the engine thread's attention and SwiGLU
here); on a GPU MLX's kernels are the right ones.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models import activations

# Tensors from this many elements on go through NumPy: below it MLX's lazy path is cheaper
# than the sync. Softmax: about even at 8-9K scores (30 layers of q @ k, softmax, @ v on this
# machine: 4.6K scores 107 us a layer with MLX against 141 with NumPy, 9.2K 208 against 187,
# 27.9K 532 against 284), so one row decoding over 3K tokens of a 3-KV-head model (28K scores)
# and a verify pass take NumPy's. SwiGLU sits between two matrix products that dwarf it below
# tens of thousands of elements (gates of 1 to 16 rows x 1,536 measured within 10% either way).
SOFTMAX_MIN = 8192
SWIGLU_MIN = 65536

_ORIGINAL_SWIGLU = activations.swiglu


def _as_float32(array: mx.array) -> np.ndarray:
    return np.asarray(array if array.dtype == mx.float32 else array.astype(mx.float32))


def _back(out: np.ndarray, dtype) -> mx.array:
    result = mx.array(out)
    return result if dtype == mx.float32 else result.astype(dtype)


def softmax(scores: mx.array) -> mx.array:
    """Softmax over the last axis, in float32 precision, in the scores' dtype."""
    if scores.size < SOFTMAX_MIN:
        return mx.softmax(scores, axis=-1, precise=True)
    a = _as_float32(scores)
    e = a - a.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return _back(e, scores.dtype)


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """silu(gate) * x, as mlx-lm's ``activations.swiglu``."""
    if gate.size < SWIGLU_MIN or gate.shape != x.shape or gate.dtype != x.dtype:
        return _ORIGINAL_SWIGLU(gate, x)
    g = _as_float32(gate)
    out = np.negative(g)
    np.exp(out, out=out)  # exp(-g): inf for g below about -88, where silu(g) is -0 (g / inf)
    out += 1.0
    np.divide(g, out, out=out)
    out *= _as_float32(x)
    return _back(out, gate.dtype)
