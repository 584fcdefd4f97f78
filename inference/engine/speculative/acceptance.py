"""Which drafted tokens a row keeps, from the target model's logits at the row's input and at
each drafted position ([1 + m, V] for a draft of m tokens).

Greedy rows keep the longest prefix of the draft that equals the target's argmax, then the
argmax after it (the bonus token): exactly what m + 1 plain greedy steps would produce.

Sampling rows use rejection sampling for a draft that is a single token per position (a point
mass, as prompt lookup's): draft token d is kept with probability p(d), where p is the row's
distribution after temperature, top-k, top-p and min-p (``Sampler.filtered``); when it is
rejected the row samples from p without d, renormalised, and stops. Then every emitted token
has distribution p exactly (P(d) = p(d); P(t) = (1 - p(d)) p(t) / (1 - p(d)) = p(t) for t != d):
the output is distributed as without speculation. When the whole draft is kept the bonus token
is sampled from p at the last position.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import mlx.core as mx

from ..sampler import RowState, Sampler, log_softmax, step_key

_MASK = -float("inf")
# Keys of the acceptance draws differ from the keys of the samples (inference.engine.sampler).
_ACCEPT_SALT = 0x5BD1E9955BD1E995


def greedy_tokens(targets: Sequence[int], draft: Sequence[int]) -> List[int]:
    """The tokens a greedy row emits: ``targets`` are the argmax at positions 0..len(draft)."""
    n = 0
    while n < len(draft) and targets[n] == draft[n]:
        n += 1
    return list(draft[:n]) + [targets[n]]


def sampling_arrays(logits: mx.array, draft: Sequence[int], row: RowState) -> Tuple[mx.array, ...]:
    """Lazy arrays for ``sampled_tokens``: ``logits`` [1 + m, V] for a draft of m tokens.

    Returns (accept [m] bool: draft token j is kept; residual [m]: the token sampled from p
    without draft token j; sample [m + 1]: a token sampled from p at each position). Draws
    come from the row's seed and its step count, so a seeded request samples the same way
    whatever else is in the batch."""
    m = len(draft)
    x = Sampler.filtered(logits.astype(mx.float32), row.params)
    noise = mx.random.gumbel(shape=x.shape, key=step_key(row.seed, row.step))
    sample = mx.argmax(x + noise, axis=-1)
    if m == 0:
        return mx.zeros((0,), dtype=mx.bool_), mx.zeros((0,), dtype=mx.uint32), sample
    d = mx.array(list(draft), dtype=mx.uint32)
    head = x[:m]
    logp = log_softmax(head)
    p_draft = mx.exp(mx.take_along_axis(logp, d[:, None], axis=-1)[:, 0])
    u = mx.random.uniform(shape=(m,), key=step_key(row.seed ^ _ACCEPT_SALT, row.step))
    accept = u < p_draft
    removed = mx.where(mx.arange(x.shape[-1])[None, :] == d[:, None], _MASK, head)
    residual = mx.argmax(removed + noise[:m], axis=-1)
    return accept, residual, sample


def sampled_tokens(
    accept: Sequence[bool], residual: Sequence[int], sample: Sequence[int], draft
) -> List[int]:
    """The tokens a sampling row emits, from the host values of ``sampling_arrays``."""
    out = []
    for j, token in enumerate(draft):
        if not accept[j]:
            return out + [residual[j]]
        out.append(token)
    return out + [sample[len(draft)]]
