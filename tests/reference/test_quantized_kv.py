"""Greedy output of the engine with quantized KV (``kv_bits``) equals mlx-lm's own generation
with the same bits token for token: a batch of prompts of different lengths (batched prefill,
joins and leaves of the decode batch), chunked prefill and preemption forced. mlx-lm's
``generate_step`` runs with ``kv_bits`` and ``quantized_kv_start=0`` over a ``QuantizedKVCache``
from the first token, as the engine quantizes (inference/engine/quantized_kv.py)."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import QuantizedKVCache

from inference.engine import LLM, ModelLoadError, SamplingParams, load_model
from inference.engine.config import EngineConfig
from inference.engine.kv_quant import KVQuant

PROMPT_LENGTHS = [1, 6, 19, 43]
NEW_TOKENS = 24
MODES = {
    "default": {},
    "chunked": dict(step_token_budget=4, prefill_chunk_size=3, max_concurrent_requests=4),
    "preempt": dict(max_kv_tokens=100, max_concurrent_requests=4),
}


@pytest.fixture(scope="module")
def path(model_dir):
    """The tiny qwen2 with head dim 64 (the tiny preset's 16 is below any quantization group)."""
    return model_dir(
        arch="qwen2", preset="tiny", hidden_size=128, num_attention_heads=2, num_key_value_heads=1
    )


@pytest.fixture(scope="module")
def reference(path):
    rng = np.random.default_rng(0)
    prompts = [rng.integers(10, 1000, size=n).tolist() for n in PROMPT_LENGTHS]
    model = load_model(path).model
    done = {}

    def get(bits, group):
        if (bits, group) not in done:
            out = []
            for prompt in prompts:
                kv = dict(kv_bits=bits, kv_group_size=group, quantized_kv_start=0) if bits else {}
                cache = (
                    [QuantizedKVCache(group_size=group, bits=bits) for _ in model.layers] if bits else None
                )
                steps = generate_step(
                    mx.array(prompt), model, max_tokens=NEW_TOKENS, prompt_cache=cache, **kv
                )
                out.append([int(token) for token, _ in steps])
            done[bits, group] = out
        return prompts, done[bits, group]

    return get


@pytest.mark.parametrize(
    "bits,group,mode", [(4, 32, "default"), (4, 32, "chunked"), (4, 32, "preempt"), (8, 64, "default")]
)
def test_greedy_matches_mlx_lm_quantized_kv(path, reference, bits, group, mode):
    prompts, expected = reference(bits, group)
    with LLM(path, kv_bits=bits, kv_group_size=group, **MODES[mode]) as llm:
        results = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))
        assert [r.token_ids for r in results] == expected
        if mode == "preempt":
            assert llm.engine.scheduler.num_preemptions > 0
    if bits == 4:  # the quantization is really in effect: float KV gives other tokens
        assert reference(None, 64)[1] != expected


def test_bad_kv_settings_are_refused(path, model_dir):
    for bad in (
        dict(kv_bits=3),
        dict(kv_group_size=48, kv_bits=8),
        dict(kv_bits="8"),
        dict(kv_bits=True),
        dict(paged_ssd_cache_bits=2),
        dict(paged_ssd_cache_bits="8"),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EngineConfig(**bad)
    # The tiny preset's head dim (16) is below every group size: refused with the reason.
    with pytest.raises(ModelLoadError, match="kv_group_size=32 does not divide its head dimension"):
        LLM(model_dir(arch="qwen2", preset="tiny"), kv_bits=4, kv_group_size=32)


@pytest.fixture(scope="module")
def sliding(model_dir):
    """gemma3_text: sliding window 16 on layers 0 and 2, full attention on 1 and 3, head dim 32;
    mlx-lm's own generation with ``QuantizedKVCache`` on every layer as the reference."""
    path = model_dir(arch="gemma3_text", preset="tiny", head_dim=32)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(10, 1000, size=n).tolist() for n in PROMPT_LENGTHS]
    model = load_model(path).model
    done = {}

    def get(bits, group):
        # mlx-lm has no quantized rotating cache, so the reference keeps every token of a
        # sliding layer in a QuantizedKVCache and the model's window mask (mlx-lm's
        # create_causal_mask with the window) hides all but the last 16 from its attention:
        # the tokens a window holds, without a window's bookkeeping.
        if (bits, group) not in done:
            out = []
            for prompt in prompts:
                cache = None
                if bits:
                    cache = [QuantizedKVCache(group_size=group, bits=bits) for _ in model.layers]
                steps = generate_step(mx.array(prompt), model, max_tokens=NEW_TOKENS, prompt_cache=cache)
                out.append([int(token) for token, _ in steps])
            done[bits, group] = out
        return path, prompts, done[bits, group]

    return get


@pytest.mark.parametrize("bits,group,mode", [(4, 32, "chunked"), (4, 32, "preempt"), (8, 32, "default")])
def test_sliding_window_layers_quantized_match_mlx_lm(sliding, bits, group, mode):
    """Every attention layer, sliding ones too, quantized: prompts longer than the window, decode
    past it (the window rotates), batched and chunked prefill, preemption, and hits on the
    blocks it stored give mlx-lm's tokens."""
    path, prompts, expected = sliding(bits, group)
    loaded = load_model(path, None, KVQuant(bits, group))
    assert loaded.cache_layout.descriptor.endswith(f"|q{bits}g{group}+sliding")
    assert [type(c).__name__ for c in loaded.new_cache()] == ["QuantizedWindowKV", "QuantizedKV"] * 2
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with LLM(path, kv_bits=bits, kv_group_size=group, cache_block_size=8, **MODES[mode]) as llm:
        assert llm.engine.runner.prefiller.together  # batched prefill passed its check
        assert [r.token_ids for r in llm.generate(prompts, params)] == expected
        again = llm.generate(prompts, params)
        if mode == "preempt":
            assert llm.engine.scheduler.num_preemptions > 0
    assert [r.token_ids for r in again] == expected
    assert [r.usage.cached_tokens for r in again] == [n - 1 for n in PROMPT_LENGTHS]
    if bits == 4:  # the quantization is really in effect: float KV gives other tokens
        assert sliding(None, 64)[2] != expected
