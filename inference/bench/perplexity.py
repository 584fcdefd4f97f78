"""Perplexity of a model over a fixed text: exp of the mean negative log-likelihood of every
token given the tokens before it.

The text is ``data/perplexity.txt``: about 3 KB of plain English prose written for omlx (original
text, owned by the project, so no model has seen it in training). It is scored in windows of
``window`` tokens through one KV cache, so the result equals one forward pass over the whole
text (every token sees all the text before it) while memory stays that of a window.

Prompt-token log-probabilities need the logits of every position; the OpenAI API gives them only
as ``echo`` with ``logprobs`` on /v1/completions, which omlx (like most servers) does not
implement. So the score is computed in-process, on the engine's own thread (``Engine.call``),
with the weights and dtype the engine serves: a local target (``omlx bench MODEL``, the console's
benchmark) has a perplexity, a ``--url`` target reports none and says why.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

TEXT_PATH = Path(__file__).with_name("data") / "perplexity.txt"
WINDOW = 256


def text() -> str:
    return TEXT_PATH.read_text(encoding="utf-8")


def token_logprobs(model, ids: List[int], window: int = WINDOW, cache: Optional[list] = None) -> List[float]:
    """log p(ids[i] | ids[:i]) for i >= 1, in float32, from ``model`` (an mlx-lm model) fed
    ``window`` tokens at a time through one prompt cache (``cache``: a fresh one to use, e.g.
    quantized KV; default mlx-lm's). MLX work: call on the model's thread."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    if len(ids) < 2:
        raise ValueError("perplexity needs at least two tokens")
    if window < 1:
        raise ValueError("window must be at least 1")
    cache = make_prompt_cache(model) if cache is None else cache
    out: List[float] = []
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start : start + window]
        targets = ids[start + 1 : start + 1 + len(chunk)]
        logits = model(mx.array([chunk]), cache=cache)[0, : len(targets)].astype(mx.float32)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        picked = mx.take_along_axis(logp, mx.array(targets)[:, None], axis=-1)[:, 0]
        out.extend(picked.tolist())
    return out


def perplexity_of(logprobs: List[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs))


def score_engine(engine, body: Optional[str] = None, window: int = WINDOW) -> dict:
    """{"tokens", "nll", "perplexity"} of ``body`` (default: the shipped text) scored by the
    model of ``engine`` (an ``inference.engine.Engine``) on its own thread, between two steps,
    through the caches the engine serves with (quantized KV with ``kv_bits``)."""
    ids = engine.encode(text() if body is None else body)

    def score(eng) -> List[float]:
        return token_logprobs(eng.loaded.model, ids, window, eng.loaded.new_cache())

    logprobs = engine.call(score)
    nll = -sum(logprobs) / len(logprobs)
    return {"tokens": len(logprobs), "nll": nll, "perplexity": math.exp(nll)}
