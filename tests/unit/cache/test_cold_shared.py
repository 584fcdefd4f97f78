"""One cold-tier folder shared by several workers: what one writes after another started, the other
restores, the partly filled last block of a prompt included (its child marker, cache/cold_kids.py).
Two ColdTier instances on one real folder stand for two workers, as in test_cold_gc.py."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import os

import pytest

from cache import cold_kids, cold_usage, gc
import mlx.core as mx

from cache.block_cache import MIN_READS, REMEASURE_EVERY, BlockCache
from cache.prefix_cache import KVSnapshot
from tests.support.cache.cold_blocks import FP, assert_same_kv, make_block, make_chain, path_of, write_all
from tests.support.cache.cold_blocks import tiers  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def _prompt_blocks():
    """Two full blocks (block size 4) and the partly filled block of the prompt's last 2 tokens."""
    chain = make_chain(FP, 2)
    return chain + [make_block(FP, (8, 9), chain[-1].key)]


def test_a_fresh_worker_restores_the_partial_block_another_worker_wrote(tiers):
    """The reader opened before the writer stored anything: its index knows none of the blocks,
    the partial one is found only through its parent, and all 10 tokens come from the SSD."""
    reader, writer = tiers(), tiers()
    blocks = _prompt_blocks()
    write_all(writer, blocks)
    cache = BlockCache(FP, 1 << 20, cold=reader)
    prompt = tuple(range(10)) + (77, 78, 79)  # the next turn: the prompt and a new message
    assert cache.peek(prompt, len(prompt)) == 10
    hit = cache.lookup(prompt, len(prompt))
    assert hit is not None and hit.num_tokens == 10 and hit.cold_tokens == 10
    assert_same_kv([tuple(a[..., 4:8, :] for a in layer) for layer in hit.layers], blocks[1].layers)
    tail = [tuple(a[..., 8:10, :] for a in layer) for layer in hit.layers]
    assert_same_kv(tail, blocks[2].layers)
    cache.release(hit)
    # A block that diverges part-way is found the same way: 1 of its 2 tokens serves this prompt.
    other = BlockCache(FP, 1 << 20, cold=tiers())
    assert other.lookup(tuple(range(9)) + (55, 56), 11).num_tokens == 9


def test_child_markers_are_hints_never_trusted(tiers):
    """A marker naming a block under another parent, a junk name and a marker whose file is gone
    serve nothing; the wrong and the dead markers are removed by the reader that finds them."""
    reader, writer = tiers(), tiers()
    blocks = _prompt_blocks()
    elsewhere = make_block(FP, (8, 9, 10), blocks[0].key)  # a child of block 0, not of block 1
    write_all(writer, blocks + [elsewhere])
    folder = cold_kids.parent_dir(reader.dir, blocks[1].key.hex())
    (folder / "not-a-key").write_bytes(b"x" * 100)
    wrong = folder / elsewhere.key.hex()
    wrong.touch()
    dead = path_of(writer, blocks[2].key)
    os.remove(dead)  # as another machine's GC would
    assert reader.children(blocks[1].key) == []
    assert not wrong.exists() and not (folder / blocks[2].key.hex()).exists()
    assert reader.stats.files == 0


def test_gc_and_clear_remove_the_markers_of_removed_blocks(tiers, tmp_path):
    writer = tiers()
    blocks = _prompt_blocks()
    write_all(writer, blocks)
    writer.close()
    kids = writer.dir / cold_kids.DIR
    assert len([p for p in kids.rglob("*") if p.is_file()]) == 3
    gc.collect(tmp_path / "cold", max_bytes=0, ttl_seconds=None)
    assert not kids.exists()
    again = tiers()
    write_all(again, blocks)
    again.close()
    assert kids.exists()
    cold_usage.clear(tmp_path / "cold", [FP.hex])
    assert not kids.exists() and not again.dir.exists()


def _poisoned(cache):
    """One slow read measured: restoring looks slower than computing every block."""
    cache.speeds.read_bytes_per_s, cache.speeds.prefill_tokens_per_s = 1.0, 1e9
    cache.speeds.reads = MIN_READS
    return cache


def test_a_worker_keeps_in_ram_what_it_computed_for_blocks_another_worker_wrote(tiers):
    """A block on the shared tier that the lookup did not restore (recomputing looked faster) is
    computed; the store must keep that KV in RAM, else every later lookup of this worker, its own
    conversations' next turns included, meets the same block on disk first and computes it all."""
    reader, writer = tiers(), tiers()
    chain = make_chain(FP, 2)
    write_all(writer, chain)
    cache = _poisoned(BlockCache(FP, 1 << 20, cold=reader))
    prompt = tuple(range(8)) + (70, 71)
    assert cache.lookup(prompt, len(prompt)) is None  # recomputed instead
    layers = [
        tuple(mx.concatenate([b.layers[i][j] for b in chain], axis=2) for j in range(2)) + (0,)
        for i in range(2)
    ]
    cache.store(prompt[:8], [KVSnapshot(8, layers)])
    hit = cache.lookup(prompt, len(prompt))
    assert hit is not None and hit.num_tokens == 8 and hit.hot_tokens == 8
    assert writer.stats.writes == 2 and reader.stats.writes == 0  # nothing written twice


def test_one_slow_read_does_not_stop_restores_for_good(tiers):
    """Reads are measured only when they happen: a refused block is restored now and then anyway,
    which measures the disk again."""
    reader, writer = tiers(), tiers()
    write_all(writer, make_chain(FP, 2))
    cache = _poisoned(BlockCache(FP, 1 << 20, cold=reader))
    prompt = tuple(range(8)) + (70, 71)
    hits = [cache.lookup(prompt, len(prompt)) for _ in range(REMEASURE_EVERY)]
    assert hits[0] is None
    restored = [h for h in hits if h is not None]
    assert restored and restored[0].cold_tokens == 4 and cache.speeds.read_bytes_per_s > 1.0
