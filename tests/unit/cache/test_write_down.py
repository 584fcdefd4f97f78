"""BlockCache.write_down (run before a model is unloaded): every hot block reaches the cold tier,
even those whose write-through a full writer queue dropped."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import pytest

from cache.block_cache import BlockCache
from tests.support.cache.cold_blocks import FP, make_chain, row_keys, tiers  # noqa: F401  (tiers: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_write_down_hands_every_hot_block_to_the_cold_tier(tiers):
    cache = BlockCache(FP, 10**8, cold=None)  # blocks stored while no cold tier took them
    blocks = make_chain(FP, 20)
    for block in blocks:
        cache.hot.add(block)
    tier = tiers(max_queue=1)  # a queue of one: put() without waiting would drop most of them
    tier.put(blocks[0])  # one block the cold tier has already
    tier.flush()
    cache.cold = tier
    handed = cache.write_down()
    assert handed == 19
    assert all(tier.contains(b.key) for b in blocks)
    assert row_keys() == {b.key.hex() for b in blocks}
    assert cache.write_down() == 0  # nothing left to hand down
    assert len(cache.hot) == 20  # the hot tier keeps its blocks until the engine closes
