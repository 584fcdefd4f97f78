"""The block cache of a model run with quantized KV (``kv_bits``): blocks hold the packed data,
scales and biases, restored from RAM and from the SSD tier bit for bit as mlx-lm's own
``QuantizedKVCache`` computes them; the KV format is part of the fingerprint, so float and
quantized blocks never serve each other; block files of a quantized model are checked against
their format."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import QuantizedKVCache

from cache import block_file
from cache.block_file import InvalidBlockFile
from inference.engine import LLM, SamplingParams
from tests.support.cache.cold_blocks import path_of
from tests.support.token_ids import random_ids

QUANT = dict(kv_bits=4, kv_group_size=32)
BLOCK = 8
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def path(model_dir):
    """The tiny qwen2 with head dim 64 (the tiny preset's 16 is below any quantization group)."""
    return model_dir(
        arch="qwen2", preset="tiny", hidden_size=128, num_attention_heads=2, num_key_value_heads=1
    )


def _mlx_lm_kv(model, tokens):
    """Per layer, the six arrays mlx-lm's QuantizedKVCache holds after computing ``tokens``."""
    caches = [
        QuantizedKVCache(group_size=QUANT["kv_group_size"], bits=QUANT["kv_bits"]) for _ in model.layers
    ]
    model(mx.array([tokens]), cache=caches)
    return [tuple(np.array(a[..., : len(tokens), :]) for a in (*c.keys, *c.values)) for c in caches]


def _look(prompt):
    def look(engine):
        hit = engine.prefix_cache.lookup(prompt + [1], max_tokens=len(prompt) + 8)
        layers = [tuple(np.array(a) for a in layer) for layer in hit.layers]
        engine.prefix_cache.release(hit)
        return hit.num_tokens, hit.hot_tokens, layers

    return look


@pytest.mark.django_db(transaction=True)
def test_blocks_restore_bit_identical_from_both_tiers(path, tmp_path):
    prompt = random_ids(44, 7)
    root = tmp_path / "ssd"
    params = SamplingParams(max_tokens=9, **GREEDY)
    with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), **QUANT) as llm:
        first = llm.generate([prompt], params)[0].token_ids
        hot = llm.engine.call(_look(prompt))
        expected = _mlx_lm_kv(llm.engine.loaded.model, prompt)
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
        tier = llm.engine.prefix_cache.cold
        key = next(iter(tier.snapshot()))
        header = block_file.read_header(path_of(tier, bytes.fromhex(key)), tier.fingerprint_hex, key)
    assert header.kv == "q4g32" and header.dtype == "float32"  # the file names its format
    with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), **QUANT) as llm:
        cold = llm.engine.call(_look(prompt))
        again = llm.generate([prompt], params)[0]
    assert hot[:2] == (44, 44) and cold[:2] == (44, 0)  # all from RAM, then all from the SSD
    for _, _, layers in (hot, cold):
        assert len(layers) == len(expected)
        for got_layer, want_layer in zip(layers, expected):
            assert [a.dtype for a in got_layer] == [a.dtype for a in want_layer]
            assert got_layer[0].dtype == np.uint32 and len(got_layer) == 6
            for got, want in zip(got_layer, want_layer):
                assert got.shape == want.shape and np.array_equal(got, want)
    assert again.usage.cached_tokens == 43 and again.token_ids == first  # (promoted by the lookup)


@pytest.mark.django_db(transaction=True)
def test_float_and_quantized_blocks_never_meet(path, tmp_path):
    """One SSD folder, one model, four KV formats (float, 4 and 8 bits, float with an 8-bit SSD
    tier): each finds only its own blocks (and leaves the others' files alone)."""
    prompt = random_ids(40, 8)
    root = tmp_path / "ssd"
    params = SamplingParams(max_tokens=4, **GREEDY)
    formats = [{}, QUANT, dict(kv_bits=8, kv_group_size=32), dict(paged_ssd_cache_bits=8)]
    prints = set()
    for rounds in range(2):
        for kv in formats:
            with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), **kv) as llm:
                prints.add(llm.engine.prefix_cache.fingerprint.hex)
                cached = llm.generate([prompt], params)[0].usage.cached_tokens
            assert cached == (39 if rounds else 0), (kv, rounds)
    assert len(prints) == 4


def _quantized_file(tmp_path, kv="q4g32", key_cols=8, scale_cols=2):
    """A valid block file of one quantized full-attention layer (4 tokens), with the key
    columns as given (valid: 8 uint32 columns of 4 bits = 64 channels = 2 groups of 32)."""
    from cache.block_key import ModelFingerprint, block_key

    fp = ModelFingerprint("w", "t", "float32", "kv:1x1x64x64|" + kv, 4)
    tokens = (1, 2, 3, 4)
    key = block_key(fp.root_key(), tokens)
    u32 = lambda cols: mx.zeros((1, 1, 4, cols), dtype=mx.uint32)  # noqa: E731
    f32 = lambda cols: mx.zeros((1, 1, 4, cols), dtype=mx.float32)  # noqa: E731
    arrays = {"l0.k": u32(key_cols), "l0.ks": f32(scale_cols), "l0.kb": f32(scale_cols)}
    arrays.update({"l0.v": u32(8), "l0.vs": f32(2), "l0.vb": f32(2)})
    meta = block_file.metadata(fp.hex, key, fp.root_key(), tokens, "float32", 1, "", kv)
    file = tmp_path / "block.safetensors"
    mx.save_safetensors(str(file), arrays, metadata=meta)
    return file, fp.hex, key.hex()


def test_quantized_block_headers_are_checked(tmp_path):
    file, fp, key = _quantized_file(tmp_path)
    header = block_file.read_header(file, fp, key, "", "q4g32")
    assert header.kv == "q4g32" and header.tensor_bytes == 2 * (4 * 8 * 4 + 2 * 4 * 2 * 4)
    with pytest.raises(InvalidBlockFile, match="KV format"):
        block_file.read_header(file, fp, key, "", "q8g32")  # another format than the tier's
    with pytest.raises(InvalidBlockFile, match="KV format"):
        block_file.read_header(file, fp, key, "", "")  # a float tier never reads it
    file, fp, key = _quantized_file(tmp_path, key_cols=8, scale_cols=4)
    with pytest.raises(InvalidBlockFile, match="disagree"):
        block_file.read_header(file, fp, key, "", "q4g32")


def test_memory_figures_are_the_bytes_of_the_arrays(path):
    """The KV bytes per token (the scheduler's budget), the pool's estimate from config.json and
    the RAM tier's bytes all count the packed data, scales and biases the engine holds."""
    from cache.ram import total_ram
    from inference.engine.kv_quant import KVQuant
    from inference.pool import memory

    prompt = random_ids(40, 9)
    with LLM(path, cache_block_size=BLOCK, **QUANT) as llm:
        llm.generate([prompt], SamplingParams(max_tokens=3, **GREEDY))
        loaded = llm.engine.loaded
        held = _mlx_lm_kv(loaded.model, prompt)
        per_token = sum(a.nbytes for layer in held for a in layer) // len(prompt)
        assert loaded.kv_bytes_per_token == per_token == 192  # float32 KV: 1024
        quant = KVQuant(QUANT["kv_bits"], QUANT["kv_group_size"])
        assert memory.kv_bytes_per_token(loaded.config, loaded.dtype, quant) == per_token
        estimate = memory.estimate(path.glob("*.safetensors"), loaded.config, QUANT)
        capacity = llm.engine.call(lambda e: e._kv_capacity())
        assert capacity == int(total_ram() * 0.25) // per_token
        assert estimate.kv_bytes == min(capacity, 16 * (4096 + 256)) * per_token
        hot = llm.engine.prefix_cache.hot
        blocks = list(hot.blocks())
        assert blocks and hot.used_bytes == sum(a.nbytes for b in blocks for layer in b.layers for a in layer)
        assert all(b.nbytes == len(b.token_ids) * per_token for b in blocks)


@pytest.mark.django_db(transaction=True)
def test_float_model_with_a_quantized_ssd_tier_restores_close_logits(path, tmp_path):
    """``paged_ssd_cache_bits``: a float model's blocks are 8-bit on disk (288 bytes a token
    instead of float32's 1,024) and dequantized on restore: the logits after a cold hit are
    close to the uncached run's, not equal."""
    prompt = random_ids(44, 11)
    params = SamplingParams(max_tokens=8, logprobs=0, **GREEDY)
    with LLM(path, prefix_cache=False) as off:
        expected = off.generate([prompt], params)[0]
    root = tmp_path / "ssd"
    settings = dict(cache_block_size=BLOCK, paged_ssd_cache_dir=str(root), paged_ssd_cache_bits=8)
    with LLM(path, **settings) as llm:
        first = llm.generate([prompt], params)[0]
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
        tier = llm.engine.prefix_cache.cold
        headers = [
            block_file.read_header(path_of(tier, bytes.fromhex(k)), tier.fingerprint_hex, k)
            for k in tier.snapshot()
        ]
    assert headers and all(h.kv == "q8g64" and h.tensor_bytes == 288 * len(h.token_ids) for h in headers)
    with LLM(path, **settings) as llm:
        restored = llm.generate([prompt], params)[0]
        hot_block = next(iter(llm.engine.prefix_cache.hot.blocks()))
    assert hot_block.layers[0][0].dtype == mx.float32  # the RAM tier holds float KV again
    assert first.token_ids == expected.token_ids  # computed, not restored: exact
    assert restored.usage.cold_cached_tokens == 43 and restored.token_ids == expected.token_ids
    diffs = [abs(a.logprob - b.logprob) for a, b in zip(restored.logprobs, expected.logprobs)]
    assert 0 < max(diffs) < 0.1, diffs
