import pytest

from cache.block_pool import BlockPool, KVBlock


def _block(name, parent=b"root", nbytes=10, tokens=(1,)):
    return KVBlock(key=name.encode(), parent=parent, token_ids=tuple(tokens), layers=[name], nbytes=nbytes)


def test_add_get_children_and_bytes():
    pool = BlockPool(100)
    a, b, c = _block("a"), _block("b", parent=b"a"), _block("c", parent=b"a")
    for blk in (a, b, c):
        assert pool.add(blk)
    assert pool.get(b"a") is a and len(pool) == 3 and pool.used_bytes == 30
    assert {blk.key for blk in pool.children(b"a")} == {b"b", b"c"}
    assert pool.children(b"zzz") == []
    assert pool.add(a) and pool.used_bytes == 30  # adding twice changes nothing


def test_lru_eviction_hands_blocks_down():
    evicted = []
    pool = BlockPool(30, on_evict=evicted.append)
    a, b, c = _block("a"), _block("b"), _block("c")
    for blk in (a, b, c):
        pool.add(blk)
    pool.touch([a])  # a becomes the most recently used
    pool.add(_block("d"))
    assert evicted == [b]
    assert pool.used_bytes == 30 and b"b" not in pool
    assert pool.stats.evictions == 1 and pool.stats.evicted_bytes == 10
    assert pool.children(b"root") and b"b" not in {blk.key for blk in pool.children(b"root")}


def test_tail_of_a_chain_goes_before_its_head():
    evicted = []
    pool = BlockPool(30, on_evict=evicted.append)
    head = _block("head")
    mid = _block("mid", parent=b"head")
    tail = _block("tail", parent=b"mid")
    for blk in (head, mid, tail):
        pool.add(blk)
    pool.touch([head, mid, tail])
    pool.set_capacity(10)
    assert evicted == [tail, mid]
    assert b"head" in pool


def test_referenced_blocks_are_never_evicted():
    evicted = []
    pool = BlockPool(20, on_evict=evicted.append)
    a, b = _block("a"), _block("b")
    pool.add(a)
    pool.add(b)
    pool.acquire([a, b])
    assert not pool.add(_block("c"))  # no room: goes straight down
    assert [blk.key for blk in evicted] == [b"c"]
    assert b"a" in pool and b"b" in pool
    pool.release([a])
    pool.set_capacity(10)
    assert b"a" not in pool and b"b" in pool
    with pytest.raises(ValueError):
        pool.release([a])


def test_block_bigger_than_the_pool_is_handed_down():
    evicted = []
    pool = BlockPool(5, on_evict=evicted.append)
    big = _block("big", nbytes=6)
    assert not pool.add(big)
    assert evicted == [big] and len(pool) == 0 and pool.used_bytes == 0


def test_flush_and_remove():
    evicted = []
    pool = BlockPool(100, on_evict=evicted.append)
    blocks = [_block(n) for n in "abc"]
    for blk in blocks:
        pool.add(blk)
    pool.remove(b"a")
    assert evicted == [] and pool.used_bytes == 20
    pool.acquire([blocks[1]])
    assert pool.flush() == 1
    assert evicted == [blocks[2]] and len(pool) == 1 and pool.used_bytes == 10


def test_negative_capacity_is_an_error():
    with pytest.raises(ValueError):
        BlockPool(-1)


def test_speed_estimate_weighs_restore_against_recompute():
    from cache.block_cache import MIN_READS, SpeedEstimate

    speeds = SpeedEstimate()
    assert speeds.restore_is_faster(10**9, 1)  # nothing measured yet: restore
    speeds.observe_prefill(1000, 1.0)  # 1000 tokens/s
    speeds.observe_read(10**6, 1.0)  # 1 MB/s: a slow disk, or one slow read
    assert speeds.restore_is_faster(10**6, 100)  # one read is not a measurement yet
    for _ in range(MIN_READS - 1):
        speeds.observe_read(10**6, 1.0)
    assert not speeds.restore_is_faster(10**6, 100)  # 1 s to read vs 0.1 s to compute
    assert speeds.restore_is_faster(10**4, 100)  # 0.01 s to read
    for _ in range(20):
        speeds.observe_read(10**9, 1.0)  # the disk got fast
    assert speeds.restore_is_faster(10**6, 100)
