"""Log-probabilities of a prompt's own tokens: what ``echo`` with ``logprobs`` on /v1/completions
returns, and what perplexity is computed from (``inference.bench.perplexity``).

The engine's steps never keep the logits of a prompt's positions (a prefill chunk computes one
position's, ``head_gate``), and prompt blocks from the cache have none at all. So the prompt is
scored apart: fed ``window`` tokens at a time through one fresh prompt cache (every token sees
all the prompt before it, memory stays that of a window), each window one ``Engine.call`` on the
engine's thread between two steps, so running streams go on between windows. The result equals
one forward pass over the whole prompt with the weights and dtype the engine serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

WINDOW = 256


@dataclass
class TokenLogprob:
    """log p(token | the tokens before it) and the ``top`` most likely tokens there, best first
    ((token id, log-probability) pairs)."""

    token_id: int
    logprob: float
    top: List[Tuple[int, float]] = field(default_factory=list)


def window_logprobs(model, cache, chunk: List[int], targets: List[int], top: int = 0) -> List[TokenLogprob]:
    """Feed ``chunk`` through ``cache``; the log-probability of ``targets[i]`` after
    ``chunk[: i + 1]`` (``targets`` is at most as long as ``chunk``), in float32. MLX work: call
    on the model's thread."""
    import mlx.core as mx

    from .sampler import log_softmax

    logits = model(mx.array([chunk]), cache=cache)[0, : len(targets)].astype(mx.float32)
    logp = log_softmax(logits)
    picked = mx.take_along_axis(logp, mx.array(targets)[:, None], axis=-1)[:, 0].tolist()
    if not top:
        return [TokenLogprob(t, p) for t, p in zip(targets, picked)]
    best = mx.argpartition(-logp, top - 1, axis=-1)[:, :top]  # then sorted: top is small
    order = mx.argsort(-mx.take_along_axis(logp, best, axis=-1), axis=-1)
    best = mx.take_along_axis(best, order, axis=-1)
    values = mx.take_along_axis(logp, best, axis=-1).tolist()
    return [
        TokenLogprob(t, p, list(zip(ids, lps)))
        for t, p, ids, lps in zip(targets, picked, best.tolist(), values)
    ]


def prompt_logprobs(
    engine, ids: List[int], top: int = 0, window: int = WINDOW, adapter: Optional[str] = None
) -> List[TokenLogprob]:
    """``ids[1:]``'s log-probabilities under ``engine``'s model (an ``inference.engine.Engine``),
    with its attached LoRA adapter ``adapter`` (None: the base), one window per ``engine.call``
    (module docstring). ValueError for fewer than two tokens or an adapter not attached."""
    if len(ids) < 2:
        raise ValueError("scoring a prompt needs at least two tokens")
    if window < 1:
        raise ValueError("window must be at least 1")
    caches = []  # made and used on the engine's thread only

    def score(start: int):
        def on_engine(eng) -> List[TokenLogprob]:
            if not caches:
                caches.append(eng.loaded.new_cache())  # the KV format it serves with
            chunk = ids[start : start + window]
            targets = ids[start + 1 : start + 1 + len(chunk)]
            slot = eng.adapter(adapter).slot if adapter is not None else 0
            with eng.runner.adapters.rows([slot]):
                return window_logprobs(eng.loaded.model, caches[0], chunk, targets, top)

        return on_engine

    out: List[TokenLogprob] = []
    for start in range(0, len(ids) - 1, window):
        out.extend(engine.call(score(start)))
    return out
