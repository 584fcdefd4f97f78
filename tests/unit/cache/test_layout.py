"""Cache layouts: which mlx-lm caches split into blocks, where a hit may end, and block files of
sliding-window and recurrent layers on the SSD tier (round trip, header checks)."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
)

from cache import block_file
from cache.block_key import ModelFingerprint, block_key
from cache.block_pool import KVBlock
from cache.layout import FULL, SLIDING, STATE, CacheLayout, LayerSpec, parse_tags
from inference.engine import cache_io
from tests.support.cache.cold_blocks import path_of, tiers, write_all  # noqa: F401  (tiers: a fixture)

LAYOUT = CacheLayout(
    (LayerSpec(SLIDING, window=3), LayerSpec(FULL), LayerSpec(STATE, shapes=((3, 8), (2, 4, 4)))),
    "mixed:test",
)
FP = ModelFingerprint("weights-m", "tok", "float32", LAYOUT.descriptor, 4)


def _filled(caches, tokens=5):
    for c in cache_io.leaves(caches):
        if isinstance(c, ArraysCache):
            c[0], c[1] = mx.zeros((1, 3, 8)), mx.zeros((1, 2, 4, 4))
        else:
            c.update_and_fetch(mx.zeros((1, 2, tokens, 8)), mx.zeros((1, 2, tokens, 8)))
    return caches


def test_layout_of_mlx_lm_caches():
    mixed = cache_io.layout_of(
        _filled([RotatingKVCache(16), KVCache(), CacheList(ArraysCache(2), KVCache())])
    )
    assert [s.kind for s in mixed.layers] == [SLIDING, FULL, STATE, FULL]
    assert mixed.layers[0].window == 16 and mixed.layers[2].shapes == ((3, 8), (2, 4, 4))
    assert mixed.tags == "s16,f,r2,f" and not mixed.plain and mixed.has_state
    assert mixed.descriptor.startswith("mixed:")
    plain = cache_io.layout_of(_filled([KVCache(), KVCache()]))
    assert plain.plain and plain.descriptor == "kv:2x2x8x8" and plain.tags == ""
    # Each part of a layout shows in its descriptor, so any change is another fingerprint.
    wider = cache_io.layout_of(
        _filled([RotatingKVCache(32), KVCache(), CacheList(ArraysCache(2), KVCache())])
    )
    assert wider.descriptor != mixed.descriptor
    state = _filled([RotatingKVCache(16), KVCache(), CacheList(ArraysCache(2), KVCache())])
    state[2].caches[0][1] = mx.zeros((1, 2, 4, 8))
    assert cache_io.layout_of(state).descriptor != mixed.descriptor


@pytest.mark.parametrize(
    "caches",
    [
        [KVCache(), ChunkedKVCache(8)],
        [KVCache(), RotatingKVCache(16, keep=4)],
        [QuantizedKVCache()],
    ],
)
def test_caches_that_cannot_be_split(caches):
    for c in caches:
        c.update_and_fetch(mx.zeros((1, 2, 5, 64)), mx.zeros((1, 2, 5, 64)))
    assert cache_io.layout_of(caches) is None


def test_where_a_hit_may_end():
    sliding = CacheLayout((LayerSpec(SLIDING, window=6), LayerSpec(FULL)), "m")
    assert sliding.hit_can_end(8, 8) and sliding.hit_can_end(4, 2)  # window >= block: anywhere
    assert not sliding.hit_can_end(8, 5)  # the block kept only its last 6 tokens
    assert LAYOUT.hit_can_end(4, 4) and not LAYOUT.hit_can_end(4, 3)  # state: block ends only
    assert parse_tags("s3,f,r2") == ((SLIDING, 3), (FULL, 0), (STATE, 2))
    for bad in ("x", "s", "s0", "r-1", "f2", "s3,,f"):
        assert parse_tags(bad) is None


def _mixed_block(tokens, parent=None, seed=0):
    rng = np.random.default_rng(seed)
    arr = lambda *shape: mx.array(rng.standard_normal(shape).astype(np.float32))  # noqa: E731
    n = len(tokens)
    layers = [
        (arr(1, 2, min(n, 3), 8), arr(1, 2, min(n, 3), 8)),
        (arr(1, 2, n, 8), arr(1, 2, n, 8)),
        (arr(1, 3, 8), mx.array(rng.standard_normal((1, 2, 4, 4)).astype(np.float16))),
    ]
    parent = parent or FP.root_key()
    return KVBlock(
        block_key(parent, tokens),
        parent,
        tuple(tokens),
        layers,
        sum(a.nbytes for layer in layers for a in layer),
    )


@pytest.mark.django_db(transaction=True)
def test_mixed_blocks_round_trip_through_the_ssd_tier_bit_for_bit(tiers):
    tier = tiers(FP, layout=LAYOUT)
    whole = _mixed_block((1, 2, 3, 4))
    tail = _mixed_block((5, 6), parent=whole.key, seed=1)
    write_all(tier, [whole, tail])
    tier.close()
    again = tiers(FP, layout=LAYOUT)  # a restart: indexed from rows, loaded from files
    assert again.stats.files == 2
    for block in (whole, tail):
        loaded = again.load(block.key)
        assert [len(layer) for layer in loaded] == [2, 2, 2]
        for got_layer, want_layer in zip(loaded, block.layers):
            for got, want in zip(got_layer, want_layer):
                assert got.dtype == want.dtype and got.shape == want.shape
                assert np.array_equal(np.array(got), np.array(want))
        header = block_file.read_header(path_of(again, block.key), FP.hex, block.key.hex(), LAYOUT.tags)
        assert header.kinds == ((SLIDING, 3), (FULL, 0), (STATE, 2))


@pytest.mark.django_db(transaction=True)
def test_block_files_of_another_layout_or_with_wrong_shapes_are_removed(tiers, tmp_path):
    tier = tiers(FP, layout=LAYOUT)
    block = _mixed_block((1, 2, 3, 4))
    write_all(tier, [block])
    path = path_of(tier, block.key)
    tier.close()
    with pytest.raises(block_file.InvalidBlockFile, match="layer kinds"):
        block_file.read_header(path, FP.hex, block.key.hex(), "s4,f,r2")

    def rewrite(layers, kinds):
        arrays = {}
        for names, layer in zip(block_file.tensor_names(parse_tags(kinds)), layers):
            arrays.update(zip(names, layer))
        meta = block_file.metadata(FP.hex, block.key, block.parent, block.token_ids, "float32", 3, kinds)
        mx.save_safetensors(str(path), arrays, metadata=meta)

    # A sliding layer that kept 4 tokens where its window is 3.
    long = [(mx.zeros((1, 2, 4, 8)), mx.zeros((1, 2, 4, 8)))] + block.layers[1:]
    rewrite(long, LAYOUT.tags)
    with pytest.raises(block_file.InvalidBlockFile, match="shape"):
        block_file.read_header(path, FP.hex, block.key.hex(), LAYOUT.tags)
    # A state without its batch axis of 1.
    rewrite(block.layers[:2] + [(mx.zeros((3, 8)), block.layers[2][1])], LAYOUT.tags)
    with pytest.raises(block_file.InvalidBlockFile, match="shape"):
        block_file.read_header(path, FP.hex, block.key.hex(), LAYOUT.tags)
    again = tiers(FP, layout=LAYOUT)  # indexed from its row; the read checks the file
    assert again.load(block.key) is None
    assert not again.contains(block.key) and not path.exists()
