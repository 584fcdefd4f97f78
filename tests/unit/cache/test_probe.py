"""cache/probe.py: the cold-tier directory probe (real files in a temp dir) and its suggestions."""

import os
import resource
import signal

import pytest

from cache.probe import ModelFacts, ProbeError, ProbeResult, probe, suggest

KIB = 1024


def test_probe_measures_and_removes_its_files(tmp_path):
    root = tmp_path / "cold"  # missing: created as the cold tier would
    r = probe(root, block_bytes=64 * KIB, files=6, large_bytes=1 << 20, large_files=2, max_seconds=5)
    assert r.directory == str(root) and r.files == 6 and r.block_bytes == 64 * KIB
    assert 0 < r.write_ms_p50 <= r.write_ms_p95 and 0 < r.read_ms_p50 <= r.read_ms_p95
    assert 64 * KIB <= r.large_bytes <= 1 << 20 and r.large_bytes % (64 * KIB) == 0
    assert r.write_bytes_per_s > 0 and r.read_bytes_per_s > 0
    assert r.read_ms(10 << 20) > r.read_ms(64 * KIB) >= r.read_overhead_ms >= 0
    if hasattr(os, "posix_fadvise") and r.filesystem not in ("tmpfs", "ramfs"):
        assert r.page_cache_dropped and not r.notes
    else:
        assert not r.page_cache_dropped and r.notes
    assert os.listdir(root) == []  # nothing left behind


def test_probe_respects_its_byte_budget(tmp_path):
    r = probe(tmp_path, block_bytes=64 * KIB, files=50, large_bytes=8 << 20, max_bytes=512 * KIB)
    assert r.files <= 8  # 512 KiB of 64 KiB files
    assert r.large_bytes == 64 * KIB  # nothing left for large files: one block each
    assert os.listdir(tmp_path) == []


def test_a_failed_write_is_a_clear_error_and_leaves_nothing(tmp_path):
    # The process may write files of at most 256 KiB: the latency files fit, the large ones fail
    # part-way (EFBIG), as on a full disk.
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * KIB, old_limit[1]))
    try:
        with pytest.raises(ProbeError) as err:
            probe(tmp_path, block_bytes=64 * KIB, files=3, large_bytes=1 << 20, max_seconds=30)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert str(tmp_path) in str(err.value) and "too large" in str(err.value).lower()
    assert os.listdir(tmp_path) == []


def test_an_unusable_directory_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ProbeError, match="cannot create the cold-tier directory"):
        probe(tmp_path / "file" / "cold")
    with pytest.raises(ValueError):
        probe(tmp_path, block_bytes=10)


def test_a_crashed_probe_folder_is_removed(tmp_path):
    stale = tmp_path / ".omlx-probe-999999999-abcd1234"
    stale.mkdir()
    (stale / "block-000.safetensors").write_bytes(b"x" * 100)
    keep = tmp_path / "0123456789abcdef0123456789abcdef"  # a model's directory is not touched
    keep.mkdir()
    probe(tmp_path, block_bytes=64 * KIB, files=3, large_bytes=128 * KIB)
    assert os.listdir(tmp_path) == [keep.name]


def _result(read_ms_p50, read_bps, block_bytes=1 << 20):
    return ProbeResult(
        directory="/d",
        filesystem="ext4",
        block_bytes=block_bytes,
        files=8,
        write_ms_p50=5,
        write_ms_p95=6,
        read_ms_p50=read_ms_p50,
        read_ms_p95=read_ms_p50,
        large_bytes=64 << 20,
        large_files=2,
        write_bytes_per_s=read_bps / 2,
        read_bytes_per_s=read_bps,
        page_cache_dropped=True,
        seconds=1.0,
    )


def _model(prefill, kv_per_token=4096):
    return ModelFacts(
        "m",
        weights_bytes=8 << 30,
        kv_bytes_per_token=kv_per_token,
        block_tokens=256,
        hot_capacity_bytes=2 << 30,
        prefill_tokens_per_s=prefill,
    )


def test_suggestions_follow_the_numbers():
    gib = 1 << 30
    fast_disk = _result(read_ms_p50=1.5, read_bps=1e9)  # 1 MiB blocks: ~0.45 ms overhead
    slow_disk = _result(read_ms_p50=60, read_bps=20e6)
    by_topic = lambda out: {s.topic: s for s in out}  # noqa: E731

    fast = by_topic(suggest(fast_disk, [_model(prefill=500)], ram_bytes=64 * gib))
    assert fast["ssd tier"].advice.startswith("keep the SSD tier")
    assert "recomputing it 512.0 ms" in fast["ssd tier"].why  # 256 tokens at 500 tokens/s
    # Restoring is far faster than recomputing: a modest hot tier (10% of RAM).
    assert fast["hot tier"].advice == "--hot-cache-max-size 6.4GiB"
    assert "2.0 GiB now" in fast["hot tier"].why

    slow = by_topic(suggest(slow_disk, [_model(prefill=20000)], ram_bytes=64 * gib))
    assert "does not pay" in slow["ssd tier"].advice and "--paged-ssd-cache-dir off" in slow["ssd tier"].why
    # Every block that leaves RAM is recomputed: all the spare RAM (64 - 8 weights - 12.8 free).
    assert slow["hot tier"].advice == "--hot-cache-max-size 43.2GiB"
    # 60 ms per 1 MiB read at 20 MB/s: ~8 ms of it per file; 256-token blocks of 1 MiB are fine.
    assert slow["block size"].advice == "keep cache_block_size 256"

    # Small blocks (64 KiB) on a disk with a 2 ms per-file cost: the cost is most of a read...
    small_disk = _result(read_ms_p50=2.5, read_bps=2e9)
    close = by_topic(suggest(small_disk, [_model(60000, kv_per_token=256)], ram_bytes=64 * gib))
    assert close["block size"].advice.startswith("larger blocks: cache_block_size ")
    assert int(close["block size"].advice.rsplit(" ", 1)[1]) > 256
    # ... which matters only while a read is not far faster than recomputing the block.
    far = by_topic(suggest(small_disk, [_model(500, kv_per_token=256)], ram_bytes=64 * gib))
    assert (
        far["block size"].advice == "keep cache_block_size 256"
        and "faster than recomputing" in far["block size"].why
    )

    restored = _model(prefill=500)
    restored.cold_read_bytes_per_s = 750e6
    assert (
        "its cache's own restores ran at 750 MB/s"
        in suggest(fast_disk, [restored], ram_bytes=64 * gib)[0].why
    )

    unmeasured = by_topic(suggest(fast_disk, [_model(prefill=0)], ram_bytes=64 * gib))
    assert "then probe again" in unmeasured["ssd tier"].advice
    assert all(s.why.endswith(".") for s in suggest(fast_disk, [], ram_bytes=64 * gib))
