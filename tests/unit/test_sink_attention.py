"""Attention over quantized KV with attention sinks (inference.engine.sink_attention) and gpt-oss
run with kv_bits: the function against MLX's own attention with sinks over the dequantized keys
and values (close: the same numbers, summed in another order) and against mlx-lm's quantized
attention without sinks (equal); the engine's batch path (decode batch, batched prefill, the
quantized windows merged and rotating) against a one-sequence mlx-lm ``generate_step`` over
quantized caches, token for token, decoding past the window of 16."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.base import create_causal_mask, quantized_scaled_dot_product_attention
from mlx_lm.models.cache import QuantizedKVCache

from inference.engine import LLM, SamplingParams
from inference.engine.kv_quant import KVQuant
from inference.engine.model_loader import load_model
from inference.engine.sink_attention import quantized_attention

B, KV, D, LK = 2, 2, 64, 40


def tensors(heads, length, seed=0):
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return mx.array(rng.standard_normal(shape).astype(np.float32))

    return normal(B, heads, length, D), normal(B, KV, LK, D), normal(B, KV, LK, D), normal(heads) * 2


def masks(length):
    """None (one query), "causal", a boolean sliding-window mask with left padding (the decode
    batch's), an additive one."""
    if length == 1:
        return [None]
    window = create_causal_mask(length, LK - length, window_size=16, left_padding=mx.array([0, 5]))
    additive = mx.where(create_causal_mask(length, LK - length), 0.0, -1e9)
    return ["causal", window, additive]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("heads", [2, 8], ids=["mha", "gqa"])
@pytest.mark.parametrize("length", [1, 6], ids=["decode", "prefill"])
def test_quantized_attention_with_sinks_is_float_attention_over_the_dequantized_kv(bits, heads, length):
    queries, keys, values, sinks = tensors(heads, length)
    qk = mx.quantize(keys, group_size=32, bits=bits)
    qv = mx.quantize(values, group_size=32, bits=bits)
    fk, fv = mx.dequantize(*qk, group_size=32, bits=bits), mx.dequantize(*qv, group_size=32, bits=bits)
    for mask in masks(length):
        got = quantized_attention(queries, qk, qv, 0.125, mask, group_size=32, bits=bits, sinks=sinks)
        want = mx.fast.scaled_dot_product_attention(queries, fk, fv, scale=0.125, mask=mask, sinks=sinks)
        assert got.shape == want.shape == (B, heads, length, D)
        assert mx.allclose(got, want, atol=1e-4, rtol=1e-4).item()
        # the sinks really count: without them the output is another one
        plain = mx.fast.scaled_dot_product_attention(queries, fk, fv, scale=0.125, mask=mask)
        assert not mx.allclose(got, plain, atol=1e-2).item()
        # without sinks: mlx-lm's quantized attention, the same operations
        bare = quantized_attention(queries, qk, qv, 0.125, mask, group_size=32, bits=bits)
        mlx_lm = quantized_scaled_dot_product_attention(queries, qk, qv, 0.125, mask, 32, bits)
        assert mx.array_equal(bare, mlx_lm).item()


NEW_TOKENS = 30  # past the window of 16 with every prompt


@pytest.mark.parametrize("bits", [8, 4])
def test_gpt_oss_with_quantized_kv_decodes_as_one_sequence(model_dir, bits):
    """gpt_oss (sinks, sliding window 16 on every other layer, experts) with kv_bits: the
    engine's batch (batched prefill, merged rows of different lengths, quantized windows
    rotating) gives the tokens of mlx-lm's one-sequence ``generate_step`` over quantized caches
    on every layer (the window mask hides the older tokens of a sliding layer from it), the same
    tokens again from its block cache."""
    path = model_dir(arch="gpt_oss", preset="tiny", head_dim=32)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(10, 1000, size=n).tolist() for n in (5, 23, 40)]
    loaded = load_model(path, None, KVQuant(bits, 32))
    assert loaded.cache_layout.descriptor.endswith(f"|q{bits}g32+sliding")
    want = []
    for prompt in prompts:
        cache = [QuantizedKVCache(group_size=32, bits=bits) for _ in loaded.model.layers]
        steps = generate_step(mx.array(prompt), loaded.model, max_tokens=NEW_TOKENS, prompt_cache=cache)
        want.append([int(token) for token, _ in steps])
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with LLM(path, kv_bits=bits, kv_group_size=32, cache_block_size=8) as llm:
        assert [r.token_ids for r in llm.generate(prompts, params)] == want
        again = llm.generate(prompts, params)
    assert [r.token_ids for r in again] == want
    assert [r.usage.cached_tokens for r in again] == [len(p) - 1 for p in prompts]
