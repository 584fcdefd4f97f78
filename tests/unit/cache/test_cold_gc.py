"""Cold-tier GC: the size cap over every model's blocks, LRU order, TTL, and the Huey task."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import os
import time
from pathlib import Path

import pytest
from django.test import override_settings

from cache import gc
from cache.models import CacheBlock
from tests.support.cache.cold_blocks import (
    FP,
    FP2,
    make_block,
    make_chain,
    path_of,
    row_keys,
    write_all,
)
from tests.support.cache.cold_blocks import tiers  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


# -- GC ---------------------------------------------------------------------------------------------


def _set_last_used(blocks_times):
    from cache import cold_index

    cold_index.installed().touch({b.key.hex(): t for b, t in blocks_times})


def _disk_keys(root):
    return {p.name[:64] for p in Path(root).rglob("*.safetensors")}


def test_gc_keeps_the_root_under_the_cap_lru_first_over_all_models(tiers, tmp_path):
    root = tmp_path / "cold"
    a, b = tiers(FP), tiers(FP2)
    blocks_a = [make_block(FP, (i, 1, 1, 1)) for i in range(4)]
    blocks_b = [make_block(FP2, (i, 2, 2, 2)) for i in range(4)]
    write_all(a, blocks_a)
    write_all(b, blocks_b)
    a.close()
    b.close()  # not loaded: their blocks count against the cap all the same
    order = [
        blocks_a[0],
        blocks_b[0],
        blocks_a[1],
        blocks_b[1],
        blocks_a[2],
        blocks_b[2],
        blocks_a[3],
        blocks_b[3],
    ]
    _set_last_used([(blk, 1000.0 + i) for i, blk in enumerate(order)])
    size = path_of(a, blocks_a[0].key).stat().st_size
    result = gc.collect(root, max_bytes=int(size * 5.5), ttl_seconds=None, now=2000.0)
    assert result.evicted == 3 and result.expired == 0 and result.files == 5
    assert result.bytes <= size * 5.5
    assert _disk_keys(root) == {blk.key.hex() for blk in order[3:]}
    assert set(CacheBlock.objects.values_list("key", flat=True)) == _disk_keys(root)
    again = gc.collect(root, max_bytes=int(size * 5.5), ttl_seconds=None, now=2000.0)
    assert again.evicted == 0 and again.files == 5


def test_gc_removes_the_tail_of_a_chain_before_its_head(tiers, tmp_path):
    tier = tiers()
    head, mid, tail = make_chain(FP, 3)
    other = make_block(FP, (50, 50, 50, 50))
    write_all(tier, [head, mid, tail, other])
    tier.close()
    # A lookup loads head first, so the head's own time is the oldest of the chain.
    _set_last_used([(head, 100.0), (mid, 101.0), (tail, 102.0), (other, 101.5)])
    size = path_of(tier, head.key).stat().st_size
    gc.collect(tier.root_dir, max_bytes=size * 3, ttl_seconds=None, now=200.0)
    assert _disk_keys(tier.root_dir) == {head.key.hex(), mid.key.hex(), tail.key.hex()}
    gc.collect(tier.root_dir, max_bytes=size * 2, ttl_seconds=None, now=200.0)
    assert _disk_keys(tier.root_dir) == {head.key.hex(), mid.key.hex()}


def test_gc_ttl_expiry_stale_rows_and_live_tiers(tiers):
    tier = tiers()
    old, new, gone = (make_block(FP, (i, 3, 3, 3)) for i in range(3))
    write_all(tier, [old, new, gone])
    tier.close()
    now = time.time()
    _set_last_used([(old, now - 7200), (new, now - 7200)])
    tier = tiers()  # last-used times come from the rows
    os.remove(path_of(tier, gone.key))  # a row without a file (a crash after a file removal)
    tier.load(new.key)  # used just now: only this process's tier knows yet
    result = gc.collect(tier.root_dir, max_bytes=None, ttl_seconds=3600, now=now + 1)
    assert result.expired == 1 and result.stale_rows == 1 and result.evicted == 0
    assert _disk_keys(tier.root_dir) == {new.key.hex()} == row_keys()
    assert not tier.contains(old.key) and not tier.contains(gone.key) and tier.contains(new.key)
    assert tier.stats.gc_runs == 1 and tier.stats.gc_removed == 2


def test_huey_task_runs_gc_with_the_settings(tiers, tmp_path):
    from cache.tasks import collect_cold_cache

    root = tmp_path / "cold"
    tier = tiers(root=root)
    blocks = [make_block(FP, (i, 4, 4, 4)) for i in range(4)]
    write_all(tier, blocks)
    size = path_of(tier, blocks[0].key).stat().st_size
    with override_settings(
        OMLX_COLD_CACHE_DIR=root, OMLX_COLD_CACHE_MAX_BYTES=2 * size, OMLX_COLD_CACHE_TTL_SECONDS=None
    ):
        assert collect_cold_cache.call_local() is None
    assert len(_disk_keys(root)) == 2 == len(row_keys()) and tier.stats.files == 2


# -- a folder shared by several workers (docs/operations.md) ---------------------------------------


def test_gc_never_removes_a_block_another_worker_is_reading(tiers, tmp_path):
    """Two tiers on one root stand for two workers: the reader's rows and memory are its own, so
    only the lease on the file (its mtime, in the future while a read runs) tells the other's GC."""
    writer = tiers()
    read, other = make_block(FP, (1, 5, 5, 5)), make_block(FP, (2, 5, 5, 5))
    write_all(writer, [read, other])
    reader = tiers()
    assert reader.load(read.key) is not None  # a read ends its lease
    path = path_of(reader, read.key)
    assert path.stat().st_mtime <= time.time()
    writer.close()
    reader.close()
    _set_last_used([(read, 100.0), (other, 100.0)])  # old by the rows
    gc.lease(path)  # as ColdTier.load does before reading: a read in progress
    result = gc.collect(tmp_path / "cold", max_bytes=0, ttl_seconds=60)
    assert _disk_keys(tmp_path / "cold") == {read.key.hex()} and result.leased == 1
    gc.release(path)
    gc.collect(tmp_path / "cold", max_bytes=0, ttl_seconds=60)
    assert _disk_keys(tmp_path / "cold") == set()


def test_reconcile_keeps_another_machines_write_in_progress(tiers):
    """A temp file of another host: its pid means nothing here, so only its age says it is a
    crash's leftover."""
    tier = tiers()
    block = make_block(FP, (3, 5, 5, 5))
    write_all(tier, [block])
    tier.close()
    shard = path_of(tier, block.key).parent
    theirs = shard / f"{block.key.hex()}.0badcafe.{2**22 + 17}-0.tmp"
    stale = shard / f"{block.key.hex()}.0badcafe.{2**22 + 18}-0.tmp"
    theirs.write_bytes(b"being written elsewhere")
    stale.write_bytes(b"left by a crash elsewhere")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    tiers()
    assert theirs.exists() and not stale.exists()


def test_a_block_another_worker_wrote_after_start_is_found(tiers):
    """Two tiers on one root, both open: what one writes, the other finds (and reads) on a miss."""
    mine, theirs = tiers(), tiers()
    block = make_block(FP, (4, 5, 5, 5))
    write_all(theirs, [block])
    assert mine.contains(block.key) and mine.entry(block.key).token_ids == block.token_ids
    assert mine.load(block.key) is not None
    assert not mine.contains(make_block(FP, (6, 5, 5, 5)).key)
