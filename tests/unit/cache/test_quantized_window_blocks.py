"""The block cache of a sliding-window model run with quantized KV (``kv_bits``): its sliding
layers' blocks hold the packed data, scales and biases of the last min(n, window) tokens, as its
full-attention layers' blocks hold all of theirs; restored from RAM and from the SSD tier bit for
bit as mlx-lm's ``QuantizedKVCache`` computes them; the format (sliding layers included) is part
of the fingerprint; the memory figures are the bytes of the arrays held."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import QuantizedKVCache

from cache import block_file
from inference.engine import LLM, SamplingParams
from tests.support.cache.cold_blocks import path_of
from tests.support.token_ids import random_ids
from tests.unit.cache.test_quantized_kv_blocks import _look

QUANT = dict(kv_bits=4, kv_group_size=32)
BLOCK = 8
WINDOW = 16  # the tiny gemma3_text preset's sliding window (layers 0 and 2)
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def path(model_dir):
    """The tiny gemma3_text (sliding window 16 on layers 0 and 2) with head dim 32."""
    return model_dir(arch="gemma3_text", preset="tiny", head_dim=32)


def _layers(caches, model, n):
    """Per layer, the six arrays of a cache list of one sequence after ``n`` tokens, a sliding
    layer's cut to its last min(n, window) tokens."""
    out = []
    for layer, c in zip(model.model.layers, caches):
        arrays = c.arrays() if hasattr(c, "arrays") else (*c.keys, *c.values)
        arrays = tuple(np.array(a[..., : a.shape[2] if hasattr(c, "arrays") else n, :]) for a in arrays)
        width = min(n, WINDOW) if layer.self_attn.is_sliding else n
        out.append(tuple(a[..., a.shape[2] - width :, :] for a in arrays))
    return out


def _reference_kv(model, tokens):
    """mlx-lm's ``QuantizedKVCache`` on every layer after ``tokens`` in one pass (it keeps every
    token; the model's window mask hides the older ones from a sliding layer's attention)."""
    caches = [
        QuantizedKVCache(group_size=QUANT["kv_group_size"], bits=QUANT["kv_bits"]) for _ in model.layers
    ]
    model(mx.array([tokens]), cache=caches)
    return _layers(caches, model, len(tokens))


def _engine_kv(loaded, tokens):
    """The engine's own caches of one sequence after ``tokens`` computed as the engine computes a
    prompt of a sliding-window model: all but the last, then the last (its own pass: the window
    has moved, so its attention sums in another order than in one pass)."""
    caches = loaded.new_cache()
    loaded.model(mx.array([tokens[:-1]]), cache=caches)
    loaded.model(mx.array([tokens[-1:]]), cache=caches)
    return _layers(caches, loaded.model, len(tokens))


@pytest.mark.django_db(transaction=True)
def test_sliding_blocks_restore_bit_identical_from_both_tiers(path, tmp_path):
    prompt = random_ids(44, 7)
    root = tmp_path / "ssd"
    params = SamplingParams(max_tokens=9, **GREEDY)
    with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), **QUANT) as llm:
        first = llm.generate([prompt], params)[0].token_ids
        hot = llm.engine.call(_look(prompt))
        computed = _engine_kv(llm.engine.loaded, prompt)
        reference = _reference_kv(llm.engine.loaded.model, prompt[:-1])
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
        tier = llm.engine.prefix_cache.cold
        key = next(iter(tier.snapshot()))
        header = block_file.read_header(path_of(tier, bytes.fromhex(key)), tier.fingerprint_hex, key)
    assert header.kv == "q4g32" and [k for k, _ in header.kinds] == ["sliding", "full"] * 2
    with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), **QUANT) as llm:
        cold = llm.engine.call(_look(prompt))
        again = llm.generate([prompt], params)[0]
    assert hot[:2] == (44, 44) and cold[:2] == (44, 0)  # all from RAM, then all from the SSD
    for _, _, layers in (hot, cold):
        assert [layer[0].shape[2] for layer in layers] == [WINDOW, 44, WINDOW, 44]
        for got_layer, want_layer, ref_layer in zip(layers, computed, reference):
            assert len(got_layer) == 6 and got_layer[0].dtype == np.uint32
            for got, want, ref in zip(got_layer, want_layer, ref_layer):
                assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
                # The tokens before the last, computed in one pass: mlx-lm's arrays bit for bit.
                k = got.shape[2] - 1
                assert np.array_equal(got[..., :k, :], ref[..., ref.shape[2] - k :, :])
    assert again.usage.cached_tokens == 43 and again.token_ids == first


@pytest.mark.django_db(transaction=True)
def test_sliding_formats_never_meet(path, tmp_path):
    """One SSD folder, the sliding-window model in three KV formats (float, 4 bits, float with an
    8-bit SSD tier, whose sliding layers are quantized on disk too): each finds only its own
    blocks."""
    prompt = random_ids(40, 8)
    root = tmp_path / "ssd"
    params = SamplingParams(max_tokens=4, **GREEDY)
    formats = [{}, QUANT, dict(paged_ssd_cache_bits=8, kv_group_size=32)]
    prints = set()
    for rounds in range(2):
        for kv in formats:
            with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), **kv) as llm:
                prints.add(llm.engine.prefix_cache.fingerprint.hex)
                if rounds:
                    llm.engine.call(lambda e: e.prefix_cache.clear_hot())  # served from the SSD
                cached = llm.generate([prompt], params)[0].usage.cached_tokens
            assert cached == (39 if rounds else 0), (kv, rounds)
    assert len(prints) == 3


def test_memory_figures_are_the_bytes_of_the_arrays(path):
    """The KV bytes per token (the scheduler's budget), the pool's estimate from config.json and
    the RAM tier's bytes count the packed data, scales and biases of every attention layer,
    sliding ones included."""
    from inference.engine.kv_quant import KVQuant
    from inference.pool import memory

    prompt = random_ids(40, 9)
    with LLM(path, cache_block_size=BLOCK, **QUANT) as llm:
        llm.generate([prompt], SamplingParams(max_tokens=3, **GREEDY))
        loaded = llm.engine.loaded
        held = _reference_kv(loaded.model, prompt[:BLOCK])  # all 8 tokens on every layer
        per_token = sum(a.nbytes for layer in held for a in layer) // BLOCK
        assert loaded.kv_bytes_per_token == per_token == 384  # float32 KV: 2,048
        quant = KVQuant(QUANT["kv_bits"], QUANT["kv_group_size"])
        assert memory.kv_bytes_per_token(loaded.config, loaded.dtype, quant) == per_token
        hot = llm.engine.prefix_cache.hot
        blocks = list(hot.blocks())
        assert blocks and hot.used_bytes == sum(a.nbytes for b in blocks for layer in b.layers for a in layer)
        # window (16) >= block (8): every layer keeps all of a block's tokens
        assert all(b.nbytes == len(b.token_ids) * per_token for b in blocks)
