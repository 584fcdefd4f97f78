"""Greedy output of the engine equals HF transformers (PyTorch, float32) token for token for the
families built with transformers' classes (inference.testkit.hf): sliding-window attention
(gemma3_text, gpt_oss), Gated DeltaNet hybrid (qwen3_5), Mamba2 hybrid (nemotron_h) and mixtures
of experts (qwen3_moe, gpt_oss), for a batch of prompts of which two are longer than the
16-token sliding window, with and without chunked prefill, and run twice with the prefix cache on.

Quantized folders (4 and 8 bits, mlx_lm.convert's format): the engine equals mlx-lm's own
generate_step one prompt at a time, and the model pool's memory estimate counts the weights as
loaded."""

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load as mlx_lm_load

from cache.prefix_cache import PrefixCache
from inference.engine import LLM, SamplingParams
from inference.engine.model_loader import load_model
from inference.testkit.quantize import quantize_model
from inference.testkit.registry import TRANSFORMERS_BUILT
from inference.testkit.hf import load_transformers
from inference.pool.memory import estimate
from tests.support.hf_reference import hf_greedy

PROMPT_LENGTHS = [1, 6, 19, 43]
NEW_TOKENS = 16
WINDOW = 16  # sliding window of the tiny gemma3_text and gpt_oss presets

MODES = {
    "default": dict(prefix_cache=False),
    # 3-token prefill chunks interleaved with running decodes: a sliding window and a recurrent
    # state must carry over from one chunk to the next.
    "chunked": dict(prefix_cache=False, step_token_budget=4, prefill_chunk_size=3, max_concurrent_requests=4),
    # The default settings, prompts run twice: the second run starts from what the block cache
    # kept of the first (where it can hold the family's state; otherwise it computes again).
    "cached": dict(cache_block_size=4),
}

# What mlx-lm's make_prompt_cache builds for each tiny preset, one entry per layer that has a cache.
CACHE_KINDS = {
    "gemma3_text": ["RotatingKVCache", "KVCache", "RotatingKVCache", "KVCache"],
    "gpt_oss": ["RotatingKVCache", "KVCache", "RotatingKVCache", "KVCache"],
    "nemotron_h": ["ArraysCache", "KVCache", "ArraysCache"],  # its MLP layers have none
    "qwen3_5": ["ArraysCache", "ArraysCache", "ArraysCache", "KVCache"],
    "qwen3_moe": ["KVCache", "KVCache"],
}


# transformers' full-sequence Mamba2 scan (its PyTorch fallback, without mamba_ssm) differs from
# its own one-token recurrent step by about 1e-3 relative per Mamba layer (up to 0.3 in the
# logits of the tiny preset); mlx-lm's agrees with that recurrent step to 1e-4. So the
# nemotron_h reference feeds the prompt one token at a time.
STEPWISE = {"nemotron_h"}


def _prompts(path):
    vocab = len(json.loads((path / "tokenizer.json").read_text())["model"]["vocab"])
    rng = np.random.default_rng(1234)
    return [rng.integers(10, vocab, size=n).tolist() for n in PROMPT_LENGTHS]


def _engine_greedy(path, prompts, runs=1, **settings):
    """The engine's greedy tokens for ``prompts``, batched; with runs=2 the batch is submitted
    again to the same engine and must give the same tokens."""
    outputs = []
    with LLM(path, **settings) as llm:
        for _ in range(runs):
            results = llm.generate(
                prompts, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
            )
            assert all(r.finish_reason == "length" for r in results), [r.error for r in results]
            outputs.append([r.token_ids for r in results])
        if runs > 1:  # every family is cached: the second run must hit
            assert type(llm.engine.prefix_cache) is not PrefixCache
            assert sum(r.usage.cached_tokens for r in results) > 0
    assert all(out == outputs[0] for out in outputs)
    return outputs[0], llm.engine


@pytest.fixture(scope="module")
def reference(model_dir):
    cache = {}

    def get(arch):
        if arch not in cache:
            path = model_dir(arch=arch, preset="tiny")
            prompts = _prompts(path)
            expected = hf_greedy(path, prompts, NEW_TOKENS, load=load_transformers, stepwise=arch in STEPWISE)
            cache[arch] = (path, prompts, expected)
        return cache[arch]

    return get


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("arch", TRANSFORMERS_BUILT)
def test_greedy_matches_transformers(reference, arch, mode):
    path, prompts, expected = reference(arch)
    got, engine = _engine_greedy(path, prompts, runs=2 if mode == "cached" else 1, **MODES[mode])
    assert got == expected
    if mode == "chunked":
        assert engine.prefill_chunks >= sum((n - 1 + 2) // 3 for n in PROMPT_LENGTHS)


@pytest.mark.parametrize("arch", TRANSFORMERS_BUILT)
def test_layers_and_caches_are_the_intended_mix(model_dir, arch):
    path = model_dir(arch=arch, preset="tiny")
    loaded = load_model(path)
    caches = make_prompt_cache(loaded.model)
    assert [type(c).__name__ for c in caches] == CACHE_KINDS[arch]
    windows = {c.max_size for c in caches if type(c).__name__ == "RotatingKVCache"}
    assert windows <= {WINDOW} and max(PROMPT_LENGTHS) > WINDOW


@pytest.fixture(scope="module")
def quantized(model_dir, tmp_path_factory):
    built = {}

    def get(arch, bits):
        if (arch, bits) not in built:
            dst = tmp_path_factory.mktemp(f"q{bits}-{arch}") / "model"
            built[arch, bits] = quantize_model(model_dir(arch=arch), dst, bits=bits, group_size=32)
        return built[arch, bits]

    return get


def _mlx_lm_greedy(path, prompts):
    """mlx-lm's own load and generate_step, one prompt at a time (the folders are float32, the
    dtype the engine runs in on CPUs)."""
    model, _ = mlx_lm_load(path)
    outputs = []
    for prompt in prompts:
        steps = generate_step(
            mx.array(prompt), model, max_tokens=NEW_TOKENS, sampler=lambda x: mx.argmax(x, -1)
        )
        outputs.append([int(token) for token, _ in steps])
    return outputs


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("arch", ["qwen2", *TRANSFORMERS_BUILT])
def test_quantized_greedy_matches_mlx_lm(quantized, arch, bits):
    path = quantized(arch, bits)
    config = json.loads((path / "config.json").read_text())
    assert config["quantization"]["bits"] == bits
    prompts = _prompts(path)
    got, _ = _engine_greedy(path, prompts, prefix_cache=False)
    assert got == _mlx_lm_greedy(path, prompts)


@pytest.mark.parametrize("bits", [4, 8, None])
@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5", "gpt_oss"])
def test_memory_estimate_counts_the_loaded_weights(model_dir, quantized, arch, bits):
    path = quantized(arch, bits) if bits else model_dir(arch=arch)
    config = json.loads((path / "config.json").read_text())
    est = estimate(sorted(path.glob("*.safetensors")), config, dict(prefix_cache=False))
    loaded = load_model(path)  # cast as the engine casts (float32 on CPUs)
    actual = sum(v.nbytes for _, v in tree_flatten(loaded.model.parameters()))
    assert est.weights_bytes == actual
    if bits:
        packed = [v for k, v in tree_flatten(loaded.model.parameters()) if v.dtype == mx.uint32]
        assert packed and actual < sum(f.stat().st_size for f in model_dir(arch=arch).glob("*.safetensors"))
