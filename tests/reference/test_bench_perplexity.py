"""The accuracy suite's perplexity (inference/bench/perplexity.py, scored on the engine's thread in
windows through one cache) equals a direct computation with mlx-lm: one forward pass over the
whole text, log-softmax, the next token's log-probability."""

import math

import mlx.core as mx
from mlx_lm import load

from inference.bench import EngineTarget, perplexity


def direct_logprobs(path, ids):
    model, _ = load(str(path))
    model.set_dtype(mx.float32)  # as the engine serves it on a CPU
    logits = model(mx.array([ids]))[0, :-1].astype(mx.float32)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.take_along_axis(logp, mx.array(ids[1:])[:, None], axis=-1)[:, 0].tolist()


def test_perplexity_equals_mlx_lm(model_dir):
    path = model_dir("llama", "tiny")
    target = EngineTarget.from_folder(path, "tiny", {"paged_ssd_cache_dir": None, "dtype": "float32"})
    with target:
        ids = target.engine.encode(perplexity.text())
        # a window that does not divide the text: every window boundary is crossed
        scored = perplexity.score_engine(target.engine, window=37)
        windowed = target.engine.call(lambda eng: perplexity.token_logprobs(eng.loaded.model, ids, 37))
    want = direct_logprobs(path, ids)
    assert len(ids) > 300 and scored["tokens"] == len(want) == len(ids) - 1
    assert max(abs(a - b) for a, b in zip(windowed, want)) < 1e-4
    nll = -sum(want) / len(want)
    assert abs(scored["nll"] - nll) < 1e-4
    assert abs(scored["perplexity"] - math.exp(nll)) < 1e-4 * math.exp(nll)
