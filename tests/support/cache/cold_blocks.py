"""Blocks, tiers and checks shared by the cold-tier tests."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from cache.block_key import ModelFingerprint, block_key
from cache.block_pool import KVBlock
from cache.cold_tier import ColdTier
from cache.models import CacheBlock

REPO = Path(__file__).resolve().parents[3]
FP = ModelFingerprint("weights-a", "tok", "float32", "kv:2x2x8", 4)
FP2 = ModelFingerprint("weights-b", "tok", "float32", "kv:2x2x8", 4)


def kv_for(key: bytes, n: int, num_layers: int = 2):
    """KV filled deterministically from the key, so contents can be checked from tokens alone."""
    rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
    return [
        tuple(mx.array(rng.standard_normal((1, 2, n, 8)).astype(np.float32)) for _ in "kv")
        for _ in range(num_layers)
    ]


def make_block(fp, tokens, parent=None):
    parent = fp.root_key() if parent is None else parent
    key = block_key(parent, tokens)
    layers = kv_for(key, len(tokens))
    return KVBlock(key, parent, tuple(tokens), layers, sum(k.nbytes + v.nbytes for k, v in layers))


def make_chain(fp, n_blocks, first_token=0):
    blocks, parent = [], fp.root_key()
    for i in range(n_blocks):
        tokens = tuple(range(first_token + 4 * i, first_token + 4 * i + 4))
        blocks.append(make_block(fp, tokens, parent))
        parent = blocks[-1].key
    return blocks


def path_of(tier, key):
    return tier.dir / key.hex()[:2] / f"{key.hex()}.safetensors"


def assert_same_kv(got, want):
    assert len(got) == len(want)
    for (gk, gv), (wk, wv) in zip(got, want):
        assert gk.shape == wk.shape and gk.dtype == wk.dtype
        assert np.array_equal(np.array(gk), np.array(wk)) and np.array_equal(np.array(gv), np.array(wv))


def row_keys(fp=FP):
    return set(CacheBlock.objects.filter(model_fingerprint=fp.hex).values_list("key", flat=True))


@pytest.fixture
def tiers(tmp_path):
    """tiers(fp=FP, root=tmp_path/"cold", **kw) -> ColdTier; all are closed at teardown."""
    made = []

    def make(fp=FP, root=None, **kw):
        made.append(ColdTier(root or tmp_path / "cold", fp, **kw))
        return made[-1]

    yield make
    for t in made:
        t.close()


def write_all(tier, blocks):
    """Put the blocks and wait until the writer has written them."""
    for b in blocks:
        tier.put(b)
    tier.flush()
