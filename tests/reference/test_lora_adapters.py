"""LoRA adapters over one shared base (inference.engine.lora): each adapter served alone gives
mlx-lm's own adapter loading token for token (mlx_lm.lora's format and PEFT's); rows of
different adapters and the base in one batch (prefill passes and decode steps shared) give what
each gives alone; and the block cache never hands one adapter's KV to the base or another
adapter."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.utils import load

from inference.engine import LLM, SamplingParams
from inference.engine.adapter_config import AdapterError
from inference.engine.prompt_logprobs import prompt_logprobs
from inference.testkit.adapters import as_mlx_adapter, build_adapter
from tests.support.engine_control import hold

NEW = 10
GREEDY = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def base(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


@pytest.fixture(scope="module")
def adapters(base, tmp_path_factory):
    """name -> (folder served, folder mlx-lm loads): two mlx_lm.lora adapters of different
    ranks and one PEFT adapter (mlx-lm loads its mlx_lm.lora rewrite)."""
    root = tmp_path_factory.mktemp("adapters")
    a1 = build_adapter(root / "a1", base, seed=1, rank=4)
    a2 = build_adapter(root / "a2", base, seed=2, rank=8, targets=("self_attn.k_proj", "mlp.up_proj"))
    peft = build_adapter(root / "p1", base, seed=3, rank=6, fmt="peft")
    return {"a1": (a1, a1), "a2": (a2, a2), "p1": (peft, as_mlx_adapter(peft, root / "p1-mlx"))}


@pytest.fixture(scope="module")
def llm(base, adapters):
    with LLM(base, dtype="float32", cache_block_size=8, max_concurrent_requests=8) as llm:
        for name, (folder, _) in adapters.items():
            llm.engine.attach_adapter(name, folder)
        yield llm


def _prompts(n):
    rng = np.random.default_rng(5)
    return [rng.integers(10, 900, size=int(k)).tolist() for k in rng.integers(3, 30, size=n)]


def _mlx_lm(base, adapter_path, prompt):
    model, _ = load(str(base), adapter_path=str(adapter_path) if adapter_path else None)
    tokens = generate_step(mx.array(prompt), model, max_tokens=NEW, sampler=lambda x: mx.argmax(x, -1))
    return [int(t) for t, _ in tokens]


@pytest.fixture(scope="module")
def references(base, adapters):
    """(adapter or None, prompt index) -> mlx-lm's greedy tokens."""
    prompts = _prompts(4)
    out = {}
    for name in [None] + list(adapters):
        for i, prompt in enumerate(prompts):
            out[name, i] = _mlx_lm(base, adapters[name][1] if name else None, prompt)
    return prompts, out


@pytest.mark.parametrize("name", [None, "a1", "a2", "p1"])
def test_each_adapter_alone_equals_mlx_lm(llm, references, name):
    prompts, want = references
    for i, prompt in enumerate(prompts[:2]):
        got = llm.generate([prompt], GREEDY, cache_salt=f"alone-{i}", adapter=name)[0].token_ids
        assert got == want[name, i], f"adapter {name}, prompt {i}"
    if name is not None:
        assert want[name, 0] != want[None, 0], "the adapter must change the output"


def test_adapters_of_one_base_in_one_batch_equal_each_alone(llm, references):
    """Base, a1, a2 and p1 rows of different lengths prefill together and decode together."""
    prompts, want = references
    names = [None, "a1", "a2", "p1", "a2", "a1", None, "p1"]
    picks = [i % len(prompts) for i in range(len(names))]
    prefill, runner = llm.engine.runner.prefiller, llm.engine.runner
    forwards, rows, passes = prefill.forwards, prefill.rows, runner.batch.passes
    release = hold(llm.engine)  # every request reaches the scheduler in one go
    streams = [
        llm.engine.submit(prompts[p], GREEDY, cache_salt="batch", adapter=n) for n, p in zip(names, picks)
    ]
    release.set()
    got = [[t for event in stream for t in event.token_ids] for stream in streams]
    assert prefill.rows - rows > prefill.forwards - forwards, "the prompts were not prefilled together"
    assert runner.batch.passes - passes < NEW * 2, "the rows did not decode in one batch"
    for name, p, tokens in zip(names, picks, got):
        assert tokens == want[name, p], f"adapter {name}, prompt {p}"


def test_a_cache_hit_never_crosses_adapters(llm, references):
    prompts, want = references
    prompt = prompts[0] + prompts[1]  # several blocks of 8

    def run(name):
        result = llm.generate([prompt], GREEDY, cache_salt="cross", adapter=name)[0]
        return result.token_ids, result.usage.cached_tokens

    base_tokens, _ = run(None)
    assert run(None)[1] > 0, "the base's second run should hit its own blocks"
    tokens, cached = run("a1")
    assert cached == 0, "an adapter reused its base's KV"
    again, cached = run("a1")
    assert cached > 0 and again == tokens, "an adapter should reuse its own KV"
    assert run("a2")[1] == 0, "an adapter reused another adapter's KV"
    assert tokens != base_tokens


def test_an_adapter_that_does_not_fit_the_base_is_refused(llm, base, tmp_path):
    bad = build_adapter(tmp_path / "bad", base, seed=9, rank=2)
    from safetensors.numpy import load_file, save_file

    weights = load_file(bad / "adapters.safetensors")
    key = next(k for k in weights if k.endswith("lora_b"))
    weights[key] = np.zeros((2, 7), dtype=np.float32)
    save_file(weights, bad / "adapters.safetensors")
    with pytest.raises(AdapterError, match="do not fit"):
        llm.engine.attach_adapter("bad", bad)
    with pytest.raises(ValueError, match="no adapter 'bad'"):
        llm.engine.submit([1, 2, 3], GREEDY, adapter="bad")


def test_an_adapter_of_the_output_head_is_refused(model_dir, tmp_path):
    """The head is shadowed by HeadGate: an adapter of it would be silently left out."""
    untied = model_dir(arch="qwen2", preset="tiny", tie_word_embeddings=False)
    head = build_adapter(tmp_path / "head", untied, seed=4, rank=2)
    from safetensors.numpy import load_file, save_file

    weights = load_file(head / "adapters.safetensors")
    hidden = next(v for k, v in weights.items() if k.endswith("q_proj.lora_a")).shape[0]
    with LLM(untied, dtype="float32") as llm:
        vocab = llm.engine.loaded.vocab_size
        weights["lm_head.lora_a"] = np.ones((hidden, 2), dtype=np.float32)
        weights["lm_head.lora_b"] = np.ones((2, vocab), dtype=np.float32)
        save_file(weights, head / "adapters.safetensors")
        with pytest.raises(AdapterError, match="lm_head: only layers inside the decoder blocks"):
            llm.engine.attach_adapter("head", head)


def test_an_adapter_over_a_quantized_base_equals_mlx_lm(tmp_path, references):
    from inference.testkit.registry import build_quantized

    prompts, _ = references
    base = build_quantized(tmp_path / "q4", 4, arch="qwen2", preset="tiny")
    adapter = build_adapter(tmp_path / "qa", base, seed=8)
    with LLM(base) as llm:
        llm.engine.attach_adapter("qa", adapter)
        got = llm.generate([prompts[0]], GREEDY, adapter="qa")[0].token_ids
    assert got == _mlx_lm(base, adapter, prompts[0])


@pytest.mark.parametrize("name", [None, "a1"])
def test_prompt_logprobs_run_with_the_adapter(llm, base, adapters, name):
    """echo's prompt logprobs (inference.engine.prompt_logprobs) of an adapter's request are the
    adapted model's: mlx-lm's forward with the adapter loaded, log-softmaxed."""
    prompt = _prompts(1)[0]
    got = [t.logprob for t in prompt_logprobs(llm.engine, prompt, window=7, adapter=name)]
    model, _ = load(str(base), adapter_path=str(adapters[name][1]) if name else None)
    logits = model(mx.array([prompt]))[0, :-1].astype(mx.float32)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    want = mx.take_along_axis(logp, mx.array(prompt[1:])[:, None], axis=-1)[:, 0].tolist()
    np.testing.assert_allclose(got, want, atol=1e-4)
