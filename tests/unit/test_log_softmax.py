"""The engine's log-softmax (inference.engine.sampler.log_softmax), which every logprob it reports
goes through: within float32's reach of a float64 evaluation over a real vocabulary's size."""

import mlx.core as mx
import numpy as np
import pytest

from inference.engine.sampler import log_softmax


def _exact(x: np.ndarray) -> np.ndarray:
    e = x.astype(np.float64)
    e = e - e.max(-1, keepdims=True)
    return e - np.log(np.exp(e).sum(-1, keepdims=True))


@pytest.mark.parametrize("spread", [1.0, 3.0])
def test_log_softmax_over_49152_logits_is_float64_close(spread):
    """Summed one term after another (mx.logsumexp on the CPU) these rows are 2e-4 to 5e-4 off;
    the blocked sum keeps them under 1e-5 (SmolLM2's vocabulary size; a few logits stand out as
    in a trained model's)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 49152)) * spread).astype(np.float32)
    x[:, :5] += 15.0
    got = np.array(log_softmax(mx.array(x)))
    assert np.abs(got - _exact(x)).max() < 1e-5


def test_log_softmax_keeps_masked_tokens_out_and_odd_sizes():
    x = np.array([[0.0, 1.0, -np.inf, 2.0, 0.5]], dtype=np.float32)  # not a multiple of the block
    got = np.array(log_softmax(mx.array(x)))
    assert got[0, 2] == -np.inf
    finite = [0, 1, 3, 4]
    assert np.allclose(got[0, finite], _exact(x[:, finite])[0], atol=1e-6)
