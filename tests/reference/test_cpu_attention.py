"""The engine's CPU attention (inference.engine.cpu_attention) against MLX's own fast attention:
every shape of head grouping and every kind of mask mlx-lm's models pass, the routing (the
engine's thread takes it, any other thread mlx-lm's function, a quantized KV cache or attention
sinks always mlx-lm's), and a loaded engine's greedy output with it on equal to mlx-lm's own
generation. Greedy output against transformers goes through it too (test_engine_reference*)."""

import threading

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models import activations, base
from mlx_lm.utils import load as mlx_lm_load

from inference.engine import LLM, SamplingParams, cpu_attention, cpu_numpy

# (batch, query heads, key/value heads, queries, keys, head size)
SHAPES = [
    (1, 14, 2, 1, 300, 64),  # a decode step of one row, 7 query heads per KV head
    (4, 14, 2, 1, 700, 64),  # a decode batch
    (2, 8, 8, 5, 5, 32),  # no grouping (multi-head)
    (3, 16, 4, 17, 40, 128),  # a prefill chunk after a cached prefix
    (1, 4, 1, 9, 9, 64),  # one KV head (multi-query)
]


def _masks(B, H, L, Lk):
    key = mx.random.key(B * 1000 + L)
    keep = mx.random.uniform(shape=(B, 1, L, Lk), key=key) > 0.3
    keep = keep | (mx.arange(Lk) == Lk - 1)  # every query sees at least one key
    per_head = (mx.random.uniform(shape=(B, H, L, Lk), key=key) > 0.2) | (mx.arange(Lk) == 0)
    return {
        "none": None,
        "causal": "causal",
        "bool [B,1,L,Lk]": keep,
        "bool [L,Lk]": keep[0, 0],
        "additive [B,1,L,Lk]": mx.where(keep, 0.0, -1e9).astype(mx.float32),
        "bool [B,H,L,Lk]": per_head,
    }


@pytest.fixture(params=["mlx softmax", "numpy softmax"])
def softmax_path(request, monkeypatch):
    """Both paths of ``cpu_numpy`` (softmax, SwiGLU): the threshold moved so that every tensor of
    the test takes the path named (the NumPy one serves large tensors)."""
    numpy = request.param == "numpy softmax"
    monkeypatch.setattr(cpu_numpy, "SOFTMAX_MIN", 0 if numpy else 10**12)
    monkeypatch.setattr(cpu_numpy, "SWIGLU_MIN", 0 if numpy else 10**12)
    return numpy


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_attention_equals_mlx_fast_attention(shape, softmax_path):
    B, H, KV, L, Lk, D = shape
    q = mx.random.normal((B, H, L, D), key=mx.random.key(1))
    k = mx.random.normal((B, KV, Lk, D), key=mx.random.key(2))
    v = mx.random.normal((B, KV, Lk, D), key=mx.random.key(3))
    scale = D**-0.5
    for name, mask in _masks(B, H, L, Lk).items():
        want = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        got = cpu_attention.attention(q, k, v, scale, mask)
        assert got.shape == want.shape, name
        assert mx.max(mx.abs(got - want)).item() < 1e-5, name


@pytest.mark.parametrize(
    "dtype,tolerance", [(mx.float32, 1e-6), (mx.bfloat16, 1e-2)], ids=["float32", "bfloat16"]
)
def test_softmax_agrees_with_float64(dtype, tolerance):
    """``cpu_numpy.softmax`` on a tensor large enough for NumPy's path, against a float64
    softmax: rows with masked keys (the dtype's smallest value, as ``attention`` masks) and a
    row masked whole (uniform, as MLX's softmax gives it)."""
    import numpy as np

    low = mx.finfo(dtype).min
    scores = (mx.random.normal((2, 2, 70, 600), key=mx.random.key(7)) * 25).astype(dtype)
    scores = mx.where(mx.arange(600) < 550, scores, mx.array(low, dtype))
    scores = mx.concatenate([scores[:, :, :69], mx.full((2, 2, 1, 600), low, dtype)], axis=2)
    assert scores.size >= cpu_numpy.SOFTMAX_MIN
    a = np.array(scores.astype(mx.float32), dtype=np.float64)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    truth = e / e.sum(axis=-1, keepdims=True)
    got = cpu_numpy.softmax(scores)
    assert got.dtype == dtype
    assert np.max(np.abs(np.array(got.astype(mx.float32), dtype=np.float64) - truth)) < tolerance
    assert np.allclose(np.array(got.astype(mx.float32))[:, :, -1], 1 / 600, rtol=tolerance)


@pytest.mark.parametrize(
    "dtype,tolerance", [(mx.float32, 1e-6), (mx.bfloat16, 1e-2)], ids=["float32", "bfloat16"]
)
def test_swiglu_agrees_with_float64_and_mlx_lm(dtype, tolerance):
    """``cpu_numpy.swiglu`` on a tensor large enough for NumPy's path (gates from -120 to 120:
    exp(-gate) overflows below about -88) against silu(gate) * x in float64 and mlx-lm's own;
    tensors of different shapes go to mlx-lm's (broadcasting)."""
    import numpy as np

    gate = mx.concatenate(
        [mx.linspace(-120, 120, 1000)[None, None], mx.random.normal((1, 69, 1000)) * 4], axis=1
    )
    x = mx.random.normal(gate.shape, key=mx.random.key(8))
    gate, x = gate.astype(dtype), x.astype(dtype)
    assert gate.size >= cpu_numpy.SWIGLU_MIN
    g, u = (np.array(a.astype(mx.float32), dtype=np.float64) for a in (gate, x))
    truth = g / (1 + np.exp(-g)) * u
    got = cpu_numpy.swiglu(gate, x)
    assert got.dtype == dtype and got.shape == gate.shape
    assert (
        np.max(np.abs(np.array(got.astype(mx.float32), dtype=np.float64) - truth) / (1 + np.abs(truth)))
        < tolerance
    )
    mlx_lm = activations.swiglu(gate, x).astype(mx.float32)
    assert mx.max(mx.abs(got.astype(mx.float32) - mlx_lm) / (1 + mx.abs(mlx_lm))).item() < 10 * tolerance
    row = x[:, :1]  # broadcast: mlx-lm's function
    assert mx.array_equal(cpu_numpy.swiglu(gate, row), activations.swiglu(gate, row))


def test_masked_keys_get_no_weight():
    """A key the mask hides changes nothing (values there are huge: any weight would show)."""
    q = mx.random.normal((1, 4, 3, 16), key=mx.random.key(4))
    k = mx.random.normal((1, 2, 6, 16), key=mx.random.key(5))
    v = mx.random.normal((1, 2, 6, 16), key=mx.random.key(6))
    hidden = mx.concatenate([v[:, :, :4], mx.full((1, 2, 2, 16), 1e6)], axis=2)
    mask = mx.arange(6)[None, :] < 4
    a = cpu_attention.attention(q, k, v, 0.25, mask)
    b = cpu_attention.attention(q, k, hidden, 0.25, mask)
    assert mx.max(mx.abs(a - b)).item() < 1e-5


def _count_calls(monkeypatch):
    calls = []
    real = cpu_attention.attention

    def counted(*args, **kwargs):
        calls.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu_attention, "attention", counted)
    return calls


def test_routing_by_thread_cache_and_sinks(model_dir, monkeypatch):
    model, _ = mlx_lm_load(str(model_dir()))
    assert cpu_attention.install(model)
    module = __import__(type(model).__module__, fromlist=["x"])
    assert module.scaled_dot_product_attention is cpu_attention._routed
    calls = _count_calls(monkeypatch)
    q = mx.random.normal((1, 4, 1, 16))
    k = v = mx.random.normal((1, 2, 5, 16))

    module.scaled_dot_product_attention(q, k, v, None, scale=0.25, mask=None)
    assert calls == []  # a thread that did not ask for it: mlx-lm's own

    def on_a_thread():
        cpu_attention.enable_on_this_thread()
        module.scaled_dot_product_attention(q, k, v, None, scale=0.25, mask=None)

        class Quantized:
            bits, group_size = 8, 64

        with pytest.raises(Exception):  # mlx-lm's quantized attention, handed plain arrays
            module.scaled_dot_product_attention(q, k, v, Quantized(), scale=0.25, mask=None)
        module.scaled_dot_product_attention(q, k, v, None, scale=0.25, mask=None, sinks=mx.zeros((4,)))

    worker = threading.Thread(target=on_a_thread, name="enabled")
    worker.start()
    worker.join()
    assert calls == ["enabled"]  # neither the quantized cache nor the sinks came here
    assert not cpu_attention.enabled_on_this_thread()
    assert base.scaled_dot_product_attention is cpu_attention._ORIGINAL  # mlx-lm's module untouched
    assert module.swiglu is cpu_attention._routed_swiglu
    assert activations.swiglu is cpu_numpy._ORIGINAL_SWIGLU


def test_a_model_using_mlx_lm_activation_classes_leaves_that_module_alone(model_dir):
    """gpt-oss's experts use a class of mlx-lm's ``activations`` module (SwigluOAI): installing
    it must not rebind ``activations.swiglu`` (every later user of mlx-lm would see the router;
    a full test run caught this as an order dependence)."""
    model, _ = mlx_lm_load(str(model_dir(arch="gpt_oss", preset="tiny")))
    assert any(type(m).__module__ == activations.__name__ for _, m in model.named_modules())
    assert cpu_attention.install(model)
    assert activations.swiglu is cpu_numpy._ORIGINAL_SWIGLU


def test_load_check_sees_a_wrong_mask_in_a_batch(model_dir, monkeypatch):
    """The check at load runs the model the way the engine does (rows of different lengths in
    one batch cache: a mask array), so a path that gets such masks wrong is left off; a prompt
    alone (a causal mask) would not show it."""
    model, _ = mlx_lm_load(str(model_dir()))
    cpu_attention.install(model)
    assert cpu_attention.agrees(model)
    grouped = cpu_attention._grouped
    monkeypatch.setattr(
        cpu_attention, "_grouped", lambda mask, kv, r: grouped(mask[:1], kv, r)
    )  # row 0's for all
    assert not cpu_attention.agrees(model)


def test_engine_uses_it_and_equals_mlx_lm(model_dir, monkeypatch, softmax_path):
    """A GQA model (4 query heads over 2) in the engine: the check at load passes, the engine's
    thread computes attention here, and greedy output equals mlx-lm's generate_step (which, on
    this test's thread, runs mlx-lm's own attention in the same process), with either softmax."""
    path = model_dir()
    calls = _count_calls(monkeypatch)
    gated, real_swiglu = [], cpu_numpy.swiglu
    monkeypatch.setattr(cpu_numpy, "swiglu", lambda g, x: gated.append(1) or real_swiglu(g, x))
    prompts = [[5, 9, 33, 7, 100, 12, 48, 3, 77], list(range(40, 71))]
    with LLM(path, prefix_cache=False) as llm:
        assert llm.engine.runner.cpu_attention is True
        out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    assert calls and set(calls) == {"omlx-engine"}
    assert gated  # the model's SwiGLU came through cpu_numpy on the engine's thread
    del calls[:], gated[:]
    model, _ = mlx_lm_load(str(path))
    for prompt, result in zip(prompts, out):
        want = [
            int(token)
            for (token, _), _ in zip(generate_step(mx.array(prompt), model, max_tokens=12), range(12))
        ]
        assert result.token_ids == want
    assert calls == [] and gated == []
