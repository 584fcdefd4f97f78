"""The cold tier: block files on disk, rows in SQLite, reconciliation, failures while running."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import json
import os
import shutil
import threading

import mlx.core as mx
import pytest

from cache import block_file
from cache.block_key import FORMAT_VERSION, block_key
from cache.cold_tier import ColdTier
from cache.models import CacheBlock
from tests.support.cache.cold_blocks import (
    FP,
    FP2,
    assert_same_kv,
    make_block,
    make_chain,
    path_of,
    row_keys,
    write_all,
)
from tests.support.cache.cold_blocks import tiers  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


# -- round trip, restart, isolation ------------------------------------------------------------------


def test_put_flush_load_round_trip_and_restart(tiers):
    tier = tiers()
    chain = make_chain(FP, 3)
    write_all(tier, chain)
    assert tier.stats.writes == 3 and tier.stats.files == 3 and tier.stats.queue_depth == 0
    for b in chain:
        assert tier.contains(b.key)
        e = tier.entry(b.key)
        assert e.layers is None and e.token_ids == b.token_ids and e.parent == b.parent
        assert e.nbytes == b.nbytes
        assert_same_kv(tier.load(b.key), b.layers)
    assert [c.key for c in tier.children(chain[0].key)] == [chain[1].key]
    assert [c.key for c in tier.children(FP.root_key())] == [chain[0].key]
    assert tier.stats.reads == 3
    row = CacheBlock.objects.get(key=chain[1].key.hex())
    assert (row.parent, row.model_fingerprint, row.token_count, row.tier) == (
        chain[0].key.hex(),
        FP.hex,
        4,
        "cold",
    )
    assert (tier.root_dir / row.file).stat().st_size == row.bytes
    tier.close()

    again = tiers()  # a restart: the index comes back from files and rows
    assert again.stats.files == 3 and again.stats.bytes == tier.stats.bytes
    for b in chain:
        assert again.entry(b.key).token_ids == b.token_ids
        assert_same_kv(again.load(b.key), b.layers)
    assert row_keys() == {b.key.hex() for b in chain}


def test_put_skips_blocks_on_disk_and_drops_when_the_queue_is_full(tiers):
    tier = tiers(max_queue=1)
    a, b, c = (make_block(FP, (i, i, i, i)) for i in range(3))
    write_all(tier, [a])
    tier.put(a)  # already on disk
    tier.flush()
    assert tier.stats.writes == 1

    entered, release = threading.Event(), threading.Event()
    real = tier.writer._write_file

    def slow_write(block, key_hex):
        entered.set()
        assert release.wait(30)
        return real(block, key_hex)

    tier.writer._write_file = slow_write
    tier.put(b)
    assert entered.wait(30)  # the writer holds b; the queue is empty
    tier.put(c)  # fills the queue of one
    tier.put(make_block(FP, (9, 9, 9, 9)))  # dropped, without blocking
    assert tier.stats.dropped == 1 and tier.stats.queue_depth == 1
    release.set()
    tier.flush()
    assert tier.contains(b.key) and tier.contains(c.key) and tier.stats.writes == 3


def test_other_models_are_invisible_and_untouched(tiers, tmp_path):
    a, b = tiers(FP), tiers(FP2)
    block_a, block_b = make_block(FP, (1, 2, 3, 4)), make_block(FP2, (1, 2, 3, 4))
    write_all(a, [block_a])
    write_all(b, [block_b])
    assert block_a.key != block_b.key
    assert not a.contains(block_b.key) and a.load(block_b.key) is None
    junk = b.dir / "zz-not-ours.bin"
    junk.write_bytes(b"other model's business")
    before = sorted(p.relative_to(b.dir) for p in b.dir.rglob("*"))
    # Another model's valid file, copied under a name in this model's directory, is refused.
    stolen = path_of(a, block_b.key)
    stolen.parent.mkdir(exist_ok=True)
    shutil.copy(path_of(b, block_b.key), stolen)
    a.close()
    a2 = tiers(FP)
    assert not a2.contains(block_b.key) and not stolen.exists()
    assert a2.contains(block_a.key)
    assert sorted(p.relative_to(b.dir) for p in b.dir.rglob("*")) == before


def test_a_file_of_another_format_version_is_never_valid(tiers):
    tier = tiers()
    block = make_block(FP, (5, 6, 7, 8))
    meta = block_file.metadata(FP.hex, block.key, block.parent, block.token_ids, "float32", 2)
    meta["format"] = str(FORMAT_VERSION + 1)
    path = path_of(tier, block.key)
    path.parent.mkdir(exist_ok=True)
    arrays = {f"l{i}.{n}": a for i, kv in enumerate(block.layers) for n, a in zip("kv", kv)}
    mx.save_safetensors(str(path), arrays, metadata=meta)
    with pytest.raises(block_file.InvalidBlockFile, match="format version"):
        block_file.read_header(path, FP.hex, block.key.hex())
    tier.close()
    assert not tiers().contains(block.key) and not path.exists()


# -- bad files --------------------------------------------------------------------------------------


def _flip_header(path):
    data = bytearray(path.read_bytes())
    for i in range(10, 40):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])


def _other_tokens(path):
    """A well-formed file under this name whose metadata names other tokens (and so another key)."""
    arrays, meta = mx.load(str(path), return_metadata=True)
    meta["tokens"] = block_file.encode_tokens((9, 9, 9, 9))
    mx.save_safetensors(str(path), arrays, metadata=meta)


def _foreign(path):
    path.write_text("not a safetensors file at all")


def _other_key(path):
    arrays, meta = mx.load(str(path), return_metadata=True)
    meta["key"] = "ab" * 32
    mx.save_safetensors(str(path), arrays, metadata=meta)


BAD = [_flip_header, _truncate, _other_tokens, _other_key, _foreign]


@pytest.mark.parametrize("spoil", BAD, ids=lambda f: f.__name__.strip("_"))
def test_bad_file_is_removed_at_reconcile(tiers, spoil):
    """Files without rows (here: the rows were lost) are checked at start. Files with rows are
    trusted until load, which checks them (next test)."""
    tier = tiers()
    good, bad = make_block(FP, (1, 1, 1, 1)), make_block(FP, (2, 2, 2, 2))
    write_all(tier, [good, bad])
    tier.close()
    CacheBlock.objects.all().delete()
    spoil(path_of(tier, bad.key))
    stray = tier.dir / good.key.hex()[:2] / "notes.txt"
    stray.write_text("foreign")
    again = tiers()
    assert not again.contains(bad.key) and again.load(bad.key) is None
    assert not path_of(again, bad.key).exists() and not stray.exists()
    assert row_keys() == {good.key.hex()}
    assert_same_kv(again.load(good.key), good.layers)


@pytest.mark.parametrize("spoil", BAD + [os.remove], ids=lambda f: f.__name__.strip("_"))
def test_bad_file_is_removed_at_load(tiers, spoil):
    tier = tiers()
    block = make_block(FP, (3, 3, 3, 3))
    write_all(tier, [block])
    spoil(path_of(tier, block.key))
    assert tier.load(block.key) is None
    assert not tier.contains(block.key) and tier.children(FP.root_key()) == []
    assert not path_of(tier, block.key).exists()
    assert tier.stats.read_errors == 1 and tier.stats.files == 0
    tier.flush()
    assert row_keys() == set()
    write_all(tier, [block])  # and it can be written again
    assert_same_kv(tier.load(block.key), block.layers)


def test_reconcile_drops_rows_without_files_reindexes_files_without_rows_removes_temp(tiers):
    tier = tiers()
    a, b, c = make_block(FP, (1, 0, 0, 0)), make_block(FP, (2, 0, 0, 0)), make_block(FP, (3, 0, 0, 0))
    write_all(tier, [a, b, c])
    tier.close()
    os.remove(path_of(tier, a.key))
    CacheBlock.objects.filter(key=b.key.hex()).delete()
    CacheBlock.objects.filter(key=c.key.hex()).update(token_ids="", kv_bytes=0)  # a pre-0002 row
    shard = path_of(tier, c.key).parent
    dead = shard / f"{c.key.hex()}.{2**22 + 17}-0.tmp"  # no such pid
    alive = shard / f"{c.key.hex()}.{os.getpid()}-99.tmp"  # a live writer's
    dead.write_bytes(b"half a block")
    alive.write_bytes(b"being written")
    again = tiers()
    assert not again.contains(a.key) and again.contains(b.key) and again.contains(c.key)
    assert row_keys() == {b.key.hex(), c.key.hex()}
    assert not dead.exists() and alive.exists()
    assert_same_kv(again.load(b.key), b.layers)
    assert again.entry(c.key).token_ids == c.token_ids and again.entry(c.key).nbytes == c.nbytes
    row = CacheBlock.objects.get(key=c.key.hex())
    assert row.token_ids == block_file.encode_tokens(c.token_ids) and row.kv_bytes == c.nbytes


# -- failures while running ---------------------------------------------------------------------------


def test_write_errors_are_counted_and_the_writer_keeps_serving(tiers, tmp_path):
    tier = tiers()
    blocked, fine = make_block(FP, (7, 0, 0, 0)), make_block(FP, (8, 0, 0, 0))
    obstacle = tier.dir / blocked.key.hex()[:2]  # a file where the shard directory must go
    shutil.rmtree(obstacle, ignore_errors=True)
    obstacle.write_bytes(b"")
    write_all(tier, [blocked, fine] if fine.key.hex()[:2] != blocked.key.hex()[:2] else [blocked])
    assert tier.stats.write_errors == 1 and not tier.contains(blocked.key)
    assert not list(tier.dir.rglob("*.tmp"))
    obstacle.unlink()
    write_all(tier, [blocked])  # the condition cleared: written
    assert tier.contains(blocked.key) and tier.stats.write_errors == 1

    shutil.rmtree(tier.dir)  # the model's directory removed under a running tier
    assert tier.load(blocked.key) is None and not tier.contains(blocked.key)
    write_all(tier, [blocked])
    assert_same_kv(tier.load(blocked.key), blocked.layers)

    shutil.rmtree(tier.root_dir)  # the root gone (an unmounted drive): not recreated
    write_all(tier, [make_block(FP, (9, 0, 0, 0))])
    assert tier.stats.write_errors == 2 and not tier.root_dir.exists()


def test_an_unusable_directory_disables_the_tier(tmp_path, caplog):
    root = tmp_path / "a-file"
    root.write_bytes(b"")
    tier = ColdTier(root, FP)
    block = make_block(FP, (1, 2, 3, 4))
    tier.put(block)
    tier.flush()
    assert not tier.enabled and not tier.contains(block.key) and tier.load(block.key) is None
    assert tier.children(FP.root_key()) == [] and tier.stats.writes == 0
    tier.close()
    assert sum("cold tier disabled" in r.getMessage() for r in caplog.records) == 1


# -- start-up speed -----------------------------------------------------------------------------------


def _write_raw_block(model_dir, fp, tokens):
    """A valid one-layer block file, written without mlx (fast enough to make thousands)."""
    parent = fp.root_key()
    key = block_key(parent, tokens)
    meta = block_file.metadata(fp.hex, key, parent, tokens, "float32", 1)
    n = len(tokens) * 2 * 8 * 4
    header = {
        "__metadata__": meta,
        "l0.k": {"dtype": "F32", "shape": [1, 2, len(tokens), 8], "data_offsets": [0, n]},
        "l0.v": {"dtype": "F32", "shape": [1, 2, len(tokens), 8], "data_offsets": [n, 2 * n]},
    }
    text = json.dumps(header).encode()
    path = model_dir / key.hex()[:2] / f"{key.hex()}.safetensors"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(2 * n))
    return key


def _drop_page_cache(root):
    """Write dirty pages back, then drop every block file's pages (as cache/probe.py does)."""
    from cache.probe import drop_cached

    os.sync()
    for path in root.rglob("*.safetensors"):
        drop_cached(path)


def test_reconcile_time_for_5000_blocks(tiers, tmp_path):
    root = tmp_path / "cold"
    model_dir = root / FP.hex
    model_dir.mkdir(parents=True)
    keys = [_write_raw_block(model_dir, FP, (i, i + 1, i + 2, i + 3)) for i in range(5000)]
    _drop_page_cache(root)  # a restart reads from the disk, not from pages the writes just filled
    first = tiers(root=root)  # no rows yet: every file re-indexed and given a row
    assert first.stats.files == 5000
    first.close()
    _drop_page_cache(root)
    second = tiers(root=root)  # the usual restart: rows and files agree
    assert second.stats.files == 5000 and len(row_keys()) == 5000
    assert_same_kv(second.load(keys[123]), [(mx.zeros((1, 2, 4, 8)), mx.zeros((1, 2, 4, 8)))])
    print(
        f"\nreconcile 5,000 blocks: {first.stats.reconcile_seconds:.3f} s without rows "
        f"(re-index + insert), {second.stats.reconcile_seconds:.3f} s with rows"
    )


def test_writes_wait_while_the_engine_prefills_but_not_for_a_flush(tiers, monkeypatch):
    import cache.cold_writer as cold_writer

    monkeypatch.setattr(cold_writer, "_MAX_DEFER", 3600.0)  # only the engine or a flush releases writes
    tier = tiers()
    waiting = threading.Event()

    class Idle(threading.Event):
        def wait(self, timeout=None):
            if not self.is_set():
                waiting.set()
            return super().wait(timeout)

    tier.writer._engine_idle = Idle()
    tier.writer._engine_idle.set()
    a, b = make_block(FP, (1, 2, 3, 4)), make_block(FP, (5, 6, 7, 8))

    tier.defer_writes(True)  # a prefill step starts
    tier.put(a)
    assert waiting.wait(30)  # the writer took the block and waits for the engine
    assert not tier.contains(a.key) and tier.stats.writes == 0
    tier.defer_writes(False)  # the step ended
    for _ in range(3000):
        if tier.contains(a.key):
            break
        threading.Event().wait(0.01)
    assert tier.contains(a.key) and path_of(tier, a.key).exists()

    tier.defer_writes(True)
    tier.put(b)
    tier.flush()  # does not wait for the engine
    assert tier.contains(b.key) and tier.stats.writes == 2
    tier.close()
    assert row_keys() == {a.key.hex(), b.key.hex()}
