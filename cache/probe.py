"""Measure the cold-tier directory, and what the numbers suggest for the cache's settings.

``probe(directory)`` writes files like the cold tier's into a temporary folder inside
``directory`` (one safetensors file per block, written durably as cache/durable.py does: temp
file, fsync, rename, fsync the directory), reads them back and removes the folder whatever
happens. Two measurements:

- latency: up to ``files`` block-sized files, each timed alone (a write is the whole durable
  write; a read is open, read every byte, close): p50 and p95 per file;
- throughput: a few large files, where per-file costs are small against the transfer (MB/s).

Reads must come from the disk, not from the page cache the writes just filled: after each fsync
the file's cached pages are dropped with ``posix_fadvise(POSIX_FADV_DONTNEED)`` where the OS has
it (Linux); elsewhere (macOS), or on a RAM file system (tmpfs), reads may come from memory and the
result says so. The probe is bounded: at most about ``max_seconds`` and ``max_bytes``.

``suggest`` turns a result and the measured speeds of the loaded models into advice on the hot
tier's size, the block size and whether the SSD tier pays at all, one sentence each with its
numbers. Nothing here imports mlx, the engine or the admin console: callers pass the facts.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from . import durable
from .sizes import total_ram

PROBE_DIR = re.compile(r"^\.omlx-probe-(\d+)-[0-9a-f]+$")
DEFAULT_BLOCK_BYTES = 4 << 20  # a 256-token block of a small model (a 7B model's is ~32 MiB)
_FADVISE = getattr(os, "POSIX_FADV_DONTNEED", None)
_RAM_FILESYSTEMS = {"tmpfs", "ramfs"}


class ProbeError(RuntimeError):
    """The directory cannot be probed (missing, not writable, disk full); the message says why."""


@dataclass
class ProbeResult:
    directory: str
    filesystem: Optional[str]  # the file system's type where the OS says (Linux), e.g. "ext4"
    block_bytes: int  # the size of each latency file
    files: int  # latency files written and read
    write_ms_p50: float
    write_ms_p95: float
    read_ms_p50: float
    read_ms_p95: float
    large_bytes: int  # the size of each throughput file
    large_files: int
    write_bytes_per_s: float
    read_bytes_per_s: float
    page_cache_dropped: bool  # reads came from the disk (as far as the OS lets us know)
    seconds: float
    notes: List[str] = field(default_factory=list)

    @property
    def read_overhead_ms(self) -> float:
        """What a block read costs beyond moving its bytes (open, metadata, seek): the p50 read
        of a block less its transfer time at the large files' speed."""
        transfer = self.block_bytes / self.read_bytes_per_s * 1000 if self.read_bytes_per_s else 0.0
        return max(0.0, self.read_ms_p50 - transfer)

    def read_ms(self, nbytes: int) -> float:
        """Estimated time to read a block file of ``nbytes`` from this directory."""
        transfer = nbytes / self.read_bytes_per_s * 1000 if self.read_bytes_per_s else 0.0
        return self.read_overhead_ms + transfer


def probe(
    directory,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    files: int = 16,
    large_bytes: int = 64 << 20,
    large_files: int = 2,
    max_seconds: float = 4.0,
    max_bytes: int = 512 << 20,
) -> ProbeResult:
    """Measure ``directory`` (created if missing, as the cold tier would); ProbeError when it
    cannot be written. See the module docstring."""
    if block_bytes < 1024 or files < 1 or large_files < 1 or max_seconds <= 0:
        raise ValueError("block_bytes >= 1024, files >= 1, large_files >= 1 and max_seconds > 0")
    root = Path(directory).expanduser()
    started = time.perf_counter()
    try:
        durable.make_dirs(root)
    except OSError as err:
        raise ProbeError(f"cannot create the cold-tier directory {root}: {err}") from None
    _remove_stale(root)
    work = root / f".omlx-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        work.mkdir()
    except OSError as err:
        raise ProbeError(f"cannot write in {root}: {err}") from None
    try:
        return _measure(
            root, work, started, block_bytes, files, large_bytes, large_files, max_seconds, max_bytes
        )
    except OSError as err:
        raise ProbeError(f"probing {root} failed: {err}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure(
    root, work, started, block_bytes, files, large_bytes, large_files, max_seconds, max_bytes
) -> ProbeResult:
    budget_bytes = max_bytes
    payload = os.urandom(block_bytes)  # incompressible, like KV values
    small: List[Path] = []
    write_s: List[float] = []
    # Latency: keep at least 3 files, and stop at 40% of the time budget.
    while len(small) < files and (len(small) < 3 or time.perf_counter() - started < 0.4 * max_seconds):
        if budget_bytes < block_bytes and len(small) >= 3:
            break
        path = work / f"block-{len(small):03d}.safetensors"
        write_s.append(_timed_write(path, [payload]))
        budget_bytes -= block_bytes
        small.append(path)
    dropped = all(drop_cached(p) for p in small)
    read_s = [_timed_read(p) for p in small]

    # Throughput: size the large files by the speed seen so far, within what is left.
    seen_bps = block_bytes * len(small) / max(sum(write_s), 1e-6)
    left_s = max(0.2, max_seconds - (time.perf_counter() - started))
    size = int(min(large_bytes, max(budget_bytes, 0) // large_files, seen_bps * left_s * 0.3 / large_files))
    size = max(block_bytes, size - size % block_bytes)
    chunks = [payload] * (size // block_bytes)
    large = [work / f"large-{i}.safetensors" for i in range(large_files)]
    write_total = sum(_timed_write(p, chunks) for p in large)
    dropped = all(drop_cached(p) for p in large) and dropped
    read_total = sum(_timed_read(p) for p in large)

    fs = _filesystem(root)
    notes = []
    if _FADVISE is None:
        notes.append(
            "this OS has no posix_fadvise: reads may come from the page cache, so the "
            "read figures may be faster than the disk"
        )
    elif not dropped:
        notes.append("dropping the page cache failed for some files: their reads may come from memory")
    if fs in _RAM_FILESYSTEMS:
        notes.append(
            f"the directory is on {fs}, a file system in RAM: these are memory speeds, "
            "and its blocks do not survive a reboot"
        )
    total = size * large_files
    return ProbeResult(
        directory=str(root),
        filesystem=fs,
        block_bytes=block_bytes,
        files=len(small),
        write_ms_p50=_percentile(write_s, 50) * 1000,
        write_ms_p95=_percentile(write_s, 95) * 1000,
        read_ms_p50=_percentile(read_s, 50) * 1000,
        read_ms_p95=_percentile(read_s, 95) * 1000,
        large_bytes=size,
        large_files=large_files,
        write_bytes_per_s=total / max(write_total, 1e-9),
        read_bytes_per_s=total / max(read_total, 1e-9),
        page_cache_dropped=dropped and _FADVISE is not None and fs not in _RAM_FILESYSTEMS,
        seconds=time.perf_counter() - started,
        notes=notes,
    )


def _timed_write(path: Path, chunks: List[bytes]) -> float:
    """Write a safetensors file of the chunks (one uint8 tensor each) as the cold tier does."""
    data_bytes = sum(len(c) for c in chunks)
    header = {"__metadata__": {"omlx": "omlx-probe"}}
    offset = 0
    for i, c in enumerate(chunks):
        header[f"l{i}.k"] = {
            "dtype": "U8",
            "shape": [1, 1, len(c), 1],
            "data_offsets": [offset, offset + len(c)],
        }
        offset += len(c)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned

    def write(f):
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)

    start = time.perf_counter()
    written = durable.write_atomically(path, path.with_name(path.name + ".tmp"), write)
    elapsed = time.perf_counter() - start
    if written != 8 + len(head) + data_bytes:
        raise OSError(f"short write: {written} bytes of {8 + len(head) + data_bytes}")
    return elapsed


def _timed_read(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while f.readinto(view):
            pass
    return time.perf_counter() - start


def drop_cached(path: Path) -> bool:
    """Ask the OS to forget the file's cached pages (clean after the fsync); False if it cannot."""
    if _FADVISE is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, _FADVISE)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = (len(ordered) - 1) * q / 100
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def _remove_stale(root: Path) -> None:
    """Folders left by a probe whose process died (a crash mid-probe)."""
    for entry in durable.scandir(root):
        m = PROBE_DIR.match(entry.name)
        if m and entry.is_dir(follow_symlinks=False) and not durable.pid_alive(int(m.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)


def _filesystem(path: Path) -> Optional[str]:
    """The type of the file system holding ``path``, from /proc/self/mounts (Linux only)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        target = str(path.resolve())
    except OSError:
        return None
    best, kind = "", None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


# -- suggestions ---------------------------------------------------------------------------------


@dataclass
class ModelFacts:
    """What the caller knows about one loaded model (the admin console reads it from the engine
    and its block cache's measured ``speeds``)."""

    name: str
    weights_bytes: int
    kv_bytes_per_token: int
    block_tokens: int
    hot_capacity_bytes: int
    prefill_tokens_per_s: float = 0.0  # measured on real prefills; 0 until one ran
    cold_read_bytes_per_s: float = 0.0  # measured on real cold-tier reads; 0 until one ran

    @property
    def block_bytes(self) -> int:
        return self.kv_bytes_per_token * self.block_tokens


@dataclass
class Suggestion:
    topic: str  # "ssd tier", "hot tier", "block size"
    advice: str  # what to do, short
    why: str  # one sentence, with the numbers


def suggest(
    result: ProbeResult, models: List[ModelFacts], ram_bytes: Optional[int] = None, block_tokens: int = 256
) -> List[Suggestion]:
    """Advice from a probe and the loaded models; see the module docstring."""
    ram = ram_bytes or total_ram()
    out: List[Suggestion] = []
    measured = [m for m in models if m.prefill_tokens_per_s > 0]
    speedups = {}  # model name -> recompute time / read time of one block
    for m in measured:
        read_ms = result.read_ms(m.block_bytes)
        recompute_ms = m.block_tokens / m.prefill_tokens_per_s * 1000
        speedups[m.name] = recompute_ms / max(read_ms, 1e-6)
        seen = (
            f" (its cache's own restores ran at {_mbs(m.cold_read_bytes_per_s)})"
            if m.cold_read_bytes_per_s > 0
            else ""
        )
        if read_ms < recompute_ms:
            out.append(
                Suggestion(
                    "ssd tier",
                    f"keep the SSD tier for {m.name}",
                    f"Reading a {m.block_tokens}-token block of {m.name} ({_mib(m.block_bytes)}) from this "
                    f"disk takes about {read_ms:.1f} ms, recomputing it {recompute_ms:.1f} ms "
                    "at the measured "
                    f"{m.prefill_tokens_per_s:.0f} prompt tokens/s: restoring is "
                    f"{speedups[m.name]:.1f}x faster{seen}.",
                )
            )
        else:
            out.append(
                Suggestion(
                    "ssd tier",
                    f"the SSD tier does not pay for {m.name}",
                    f"Reading a {m.block_tokens}-token block of {m.name} ({_mib(m.block_bytes)}) takes about "
                    f"{read_ms:.1f} ms but recomputing it only {recompute_ms:.1f} ms at "
                    f"{m.prefill_tokens_per_s:.0f} prompt tokens/s{seen}, so the cache recomputes instead "
                    "of reading: use a faster disk or turn the SSD tier off (--paged-ssd-cache-dir off).",
                )
            )
    if not measured:
        out.append(
            Suggestion(
                "ssd tier",
                "send a request to a model, then probe again",
                f"This disk reads a {_mib(result.block_bytes)} block in {result.read_ms_p50:.1f} ms (p50) "
                f"and streams at {_mbs(result.read_bytes_per_s)}, but no loaded model has measured its "
                "prefill speed yet, and that is what a read must beat.",
            )
        )

    weights = sum(m.weights_bytes for m in models)
    headroom = max(4 << 30, ram // 5)  # the OS, KV of running requests, other programs
    spare = max(0, ram - weights - headroom)
    per_model = spare // max(1, len(models))
    current = max((m.hot_capacity_bytes for m in models), default=None)
    fast = bool(speedups) and min(speedups.values()) >= 10
    if fast:
        size = min(per_model, ram // 10)
        why = (
            f"Restoring from this disk is at least {min(speedups.values()):.0f}x faster than "
            f"recomputing, so a modest hot tier is enough: {_gib(size)} per model of "
            f"{_gib(ram)} RAM ({_gib(weights)} in loaded weights, {_gib(headroom)} kept free)"
        )
    else:
        size = per_model
        reason = (
            "the disk is not much faster than recomputing"
            if speedups
            else "no prefill speed is measured yet, so keep what RAM allows"
        )
        who = f"each of the {len(models)} loaded models" if len(models) > 1 else "a model"
        why = (
            f"With {_gib(ram)} RAM, {_gib(weights)} in loaded weights and {_gib(headroom)} kept "
            f"free, {who} can hold {_gib(size)} of KV blocks in RAM, and {reason}"
        )
    if current is not None:
        why += f"; it is {_gib(current)} now."
    else:
        why += "."
    out.append(Suggestion("hot tier", f"--hot-cache-max-size {_gib(size).replace(' ', '')}", why))

    per_token = max((m.kv_bytes_per_token for m in models), default=0) or max(
        1, result.block_bytes // block_tokens
    )
    tokens = max((m.block_tokens for m in models), default=block_tokens)
    overhead = result.read_overhead_ms
    transfer = result.read_ms(per_token * tokens) - overhead
    # Per-file cost at most a fifth of a block read: blocks of at least 4x overhead's worth of bytes.
    wanted = 4 * overhead / 1000 * result.read_bytes_per_s / per_token if result.read_bytes_per_s else 0
    better = min(2048, 1 << max(0, int(wanted - 1).bit_length())) if wanted > tokens else tokens
    if better > tokens and fast:
        out.append(
            Suggestion(
                "block size",
                f"keep cache_block_size {tokens}",
                f"Per-file costs are {overhead / max(overhead + transfer, 1e-9):.0%} of a {tokens}-token "
                f"block read ({overhead:.2f} of {overhead + transfer:.2f} ms), but the whole read is still "
                f"{min(speedups.values()):.0f}x faster than recomputing the block, so larger blocks would "
                "gain little.",
            )
        )
    elif better > tokens:
        out.append(
            Suggestion(
                "block size",
                f"larger blocks: cache_block_size {better}",
                f"Each block read costs {overhead:.2f} ms beyond its {transfer:.2f} ms of transfer at "
                f"{tokens} tokens per block ({overhead / max(overhead + transfer, 1e-9):.0%} of the read); "
                f"{better}-token blocks bring per-file costs under a fifth of a read.",
            )
        )
    else:
        out.append(
            Suggestion(
                "block size",
                f"keep cache_block_size {tokens}",
                f"A {tokens}-token block ({_mib(per_token * tokens)}) takes {transfer:.2f} ms to transfer "
                f"and only {overhead:.2f} ms more per file, so larger blocks would gain little and "
                "reuse partial prefixes less finely.",
            )
        )
    return out


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _mbs(bps: float) -> str:
    return f"{bps / 1e6:.0f} MB/s"
