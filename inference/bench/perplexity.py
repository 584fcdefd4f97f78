"""Perplexity of a model over a fixed text: exp of the mean negative log-likelihood of every
token given the tokens before it.

The text is ``data/perplexity.txt``: about 3 KB of plain English prose written for omlx (original
text, owned by the project, so no model has seen it in training). It is scored in windows of
``window`` tokens through one KV cache (``inference.engine.prompt_logprobs``), so the result
equals one forward pass over the whole text (every token sees all the text before it) while
memory stays that of a window.

Two ways to the same numbers: in-process, on the engine's own thread (``score_engine``: a local
target, ``omlx bench MODEL``, the console's benchmark), and over HTTP (``score_url``: a ``--url``
target), as OpenAI's legacy API gives prompt-token log-probabilities: ``/v1/completions`` with
``echo`` and ``logprobs``, ``max_tokens`` 0. omlx serves that (docs/api.md); a server that does
not is reported with its answer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

from inference.engine.prompt_logprobs import WINDOW, prompt_logprobs, window_logprobs

TEXT_PATH = Path(__file__).with_name("data") / "perplexity.txt"

__all__ = ["TEXT_PATH", "WINDOW", "perplexity_of", "score_engine", "score_url", "text", "token_logprobs"]


def text() -> str:
    return TEXT_PATH.read_text(encoding="utf-8")


def token_logprobs(model, ids: List[int], window: int = WINDOW, cache: Optional[list] = None) -> List[float]:
    """log p(ids[i] | ids[:i]) for i >= 1, in float32, from ``model`` (an mlx-lm model) fed
    ``window`` tokens at a time through one prompt cache (``cache``: a fresh one to use, e.g.
    quantized KV; default mlx-lm's). MLX work: call on the model's thread."""
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
        out.extend(t.logprob for t in window_logprobs(model, cache, chunk, targets))
    return out


def perplexity_of(logprobs: List[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs))


def _summary(logprobs: List[float]) -> dict:
    nll = -sum(logprobs) / len(logprobs)
    return {"tokens": len(logprobs), "nll": nll, "perplexity": math.exp(nll)}


def score_engine(engine, body: Optional[str] = None, window: int = WINDOW) -> dict:
    """{"tokens", "nll", "perplexity"} of ``body`` (default: the shipped text) scored by the
    model of ``engine`` (an ``inference.engine.Engine``) on its own thread, a window per call."""
    ids = engine.encode(text() if body is None else body)
    return _summary([t.logprob for t in prompt_logprobs(engine, ids, window=window)])


def score_url(target, body: Optional[str] = None) -> dict:
    """The same over HTTP: ``target`` (an ``OpenAITarget``) is asked for the text's prompt-token
    log-probabilities (echo, logprobs 0, max_tokens 0). ValueError says why a server gave none."""
    import httpx

    request = {
        "model": target.model,
        "prompt": text() if body is None else body,
        "echo": True,
        "logprobs": 0,
        "max_tokens": 0,
        "temperature": 0,
    }
    try:
        response = target.client.post(f"{target.url}/completions", json=request, headers=target.headers)
    except httpx.HTTPError as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ValueError(f"HTTP {response.status_code}: {response.text[:200]}")
    try:
        values = response.json()["choices"][0]["logprobs"]["token_logprobs"]
    except (ValueError, KeyError, IndexError, TypeError):
        values = None
    if not isinstance(values, list) or len(values) < 2 or values[0] is not None:
        raise ValueError("the server gave no prompt-token logprobs (echo with logprobs on /v1/completions)")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values[1:]):
        raise ValueError("the server's prompt-token logprobs are not numbers")
    return _summary([float(v) for v in values[1:]])
