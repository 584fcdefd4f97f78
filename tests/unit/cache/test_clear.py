"""Clearing a model's KV blocks from both tiers (cache/clear.py), with a real engine."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import numpy as np
import pytest

from cache.block_pool import BlockPool
from cache.clear import clear_model
from cache.cold_usage import usage
from inference.engine import LLM, SamplingParams
from tests.support.cache.cold_blocks import FP, make_chain, row_keys

pytestmark = pytest.mark.django_db(transaction=True)
GREEDY = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)


def test_drop_unreferenced_keeps_held_blocks():
    handed = []
    pool = BlockPool(10**9, on_evict=handed.append)
    chain = make_chain(FP, 4)
    for b in chain:
        pool.add(b)
    pool.acquire([chain[1]])
    blocks, nbytes = pool.drop_unreferenced()
    assert blocks == 3 and nbytes == sum(b.nbytes for b in chain) - chain[1].nbytes
    assert pool.blocks() == [chain[1]] and pool.used_bytes == chain[1].nbytes
    assert handed == []  # nothing was written down: the blocks are gone from every tier
    assert pool.children(chain[0].key) == [chain[1]]
    pool.release([chain[1]])
    assert pool.drop_unreferenced() == (1, chain[1].nbytes) and pool.used_bytes == 0


def test_clear_removes_both_tiers_of_a_loaded_model(model_dir, tmp_path):
    root = tmp_path / "cold"
    prompt = np.random.default_rng(7).integers(10, 900, size=40).tolist()
    with LLM(model_dir("qwen2", "tiny"), cache_block_size=8, paged_ssd_cache_dir=str(root)) as llm:
        engine = llm.engine
        first = llm.generate([prompt], GREEDY)[0]
        assert first.usage.cached_tokens == 0
        assert llm.generate([prompt], GREEDY)[0].usage.hot_cached_tokens == 39
        cache = engine.prefix_cache
        fp = cache.fingerprint.hex
        engine.call(lambda e: e.prefix_cache.cold.flush())
        files = {u.fingerprint: u.files for u in usage(root)}[fp]
        hot_blocks = len(cache.hot)
        assert files > 0 and hot_blocks > 0 and cache.cold.stats.files == files

        cleared = clear_model(root, fp, on_engine=lambda fn: engine.call(lambda e: fn(e.prefix_cache)))
        assert cleared.hot_blocks == hot_blocks and cleared.hot_bytes > 0
        assert (cleared.cold_files, cleared.rows) == (files, files) and cleared.cold_bytes > 0
        assert len(cache.hot) == 0 and cache.hot.used_bytes == 0
        assert cache.cold.stats.files == 0 and cache.cold.stats.gc_removed == 0
        assert not (root / fp).exists() and row_keys(cache.fingerprint) == set()

        again = llm.generate([prompt], GREEDY)[0]
        assert again.usage.cached_tokens == 0 and again.usage.computed_prompt_tokens == 40
        assert again.token_ids == first.token_ids


def test_clear_of_a_model_that_is_not_loaded_and_a_bad_fingerprint(tmp_path):
    with pytest.raises(ValueError):
        clear_model(tmp_path, "../etc")
    assert clear_model(None, FP.hex).cold_files == 0  # the cold tier is off: nothing to remove
