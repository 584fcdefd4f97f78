"""Garbage collection of the cold tier: TTL expiry, then a size cap over every model's blocks.

``collect`` works on the whole cold-cache root, the directories of models that are not loaded
included, so they count against the cap too. How it thinks:

1. Read the rows first, then list the files. A writer creates a file before its row, so a row
   whose file is missing from the listing was not written after the listing: it is stale.
2. A block's last use is the newest of its row, the in-memory time of a live ColdTier in this
   process (rows are updated lazily), and, for a file without a row, its mtime.
3. A block counts as used when any block below it in its chain was (its *effective* time): a
   lookup walks a chain from its head, so a tail without its head is unreachable. Ties go
   deepest first, so the tail of a chain is removed before its head.
4. Remove blocks whose effective time is older than the TTL; then, while the total size is over
   the cap, the least recently used.

Several processes may share one root, on one machine or on several (a network file system), each
with its own rows: a process's rows know nothing of the others' reads. So a file's mtime is the
shared record: a reader sets it to ``now + READ_LEASE_SECONDS`` before it reads the file
(``lease``) and back to now once done (``release``), and

5. A file whose mtime is in the future is leased: it counts as used now (so do the blocks above
   it in its chain) and is never removed, whatever its age or the cap. GC checks the mtime again
   right before removing a file, so a read that began after the listing is respected too. Clocks
   of the machines must agree within the lease (NTP does).

Writers' mtimes are their write times (never in the future), so only reads lease. A read that
races a removal at the very instant finds the file gone: a miss, never wrong data.

Removal order: the file, then the row. A crash between the two leaves a row without a file,
which the next ``collect`` and the next ColdTier start both drop, so the removal completes; a
file is never left behind without a row by GC. Live ColdTier objects of this process are
registered here and told which of their blocks went, so their indexes stop offering them; a
tier in another process finds the file missing at load (a miss) and forgets it then.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from . import cold_index, cold_kids
from .block_file import BLOCK_NAME, FINGERPRINT_DIR, SHARD_DIR

logger = logging.getLogger("omlx.cache.gc")

READ_LEASE_SECONDS = 120.0

_live: "weakref.WeakSet" = weakref.WeakSet()
_live_lock = threading.Lock()


def lease(path) -> None:
    """A block file is about to be read: no GC removes it until ``release``, or for
    READ_LEASE_SECONDS if the reader dies first (best effort)."""
    until = time.time() + READ_LEASE_SECONDS
    try:
        os.utime(path, (until, until))
    except OSError:
        pass  # the read that follows finds out what is wrong


def release(path) -> None:
    """The read of ``path`` is over: its mtime is now (its last use)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _leased(path: str) -> bool:
    try:
        return os.stat(path).st_mtime > time.time()
    except OSError:
        return False


def register(tier) -> None:
    """A running ColdTier: it has ``root_dir``, ``fingerprint_hex``, ``snapshot()``, ``forget()``
    and ``note_gc_run()``."""
    with _live_lock:
        _live.add(tier)


def unregister(tier) -> None:
    with _live_lock:
        _live.discard(tier)


def live_tiers() -> list:
    with _live_lock:
        return list(_live)


@dataclass
class GCResult:
    files: int = 0  # block files left
    bytes: int = 0  # their total size
    expired: int = 0  # removed by the TTL
    evicted: int = 0  # removed by the size cap, least recently used first
    removed_bytes: int = 0
    stale_rows: int = 0  # rows without a file, dropped
    leased: int = 0  # chosen for removal but spared: a process is reading them (``lease``)
    seconds: float = 0.0


@dataclass
class _Block:
    key: str
    fingerprint: str
    path: str
    size: int
    parent: Optional[str]
    last_used: float


def collect(
    root_dir, max_bytes: Optional[int], ttl_seconds: Optional[float], now: Optional[float] = None
) -> GCResult:
    """Remove expired blocks, then least recently used ones until the root holds at most
    ``max_bytes`` (None: no cap; None TTL: no expiry). See the module docstring."""
    started = time.perf_counter()
    wall = time.time()  # leases are by the clock (``now`` may be simulated)
    now = wall if now is None else now
    root = Path(root_dir).expanduser()
    result = GCResult()
    index = cold_index.installed()
    rows = _read_rows(index)
    blocks = _list_blocks(root)
    tiers = _tiers_under(root)
    for b in blocks.values():
        row = rows.get(b.key)
        leased = b.last_used > wall  # the file's mtime: a reader's lease
        if row is not None:
            b.parent, b.last_used = row[0], row[2]
        if leased:
            b.last_used = now
        live = tiers.get(b.fingerprint)
        if live is not None:
            parent, t = live[1].get(b.key, (None, 0.0))
            b.parent = b.parent or parent
            b.last_used = max(b.last_used, t)
    on_disk = {d.name for d in _subdirs(root) if FINGERPRINT_DIR.match(d.name)}
    stale = [k for k, r in rows.items() if k not in blocks and r[1] in on_disk]

    effective, depth = _effective_times(blocks)
    victims: List[_Block] = []
    if ttl_seconds is not None:
        for b in blocks.values():
            if now - effective[b.key] > ttl_seconds:
                victims.append(b)
        result.expired = len(victims)
    total = sum(b.size for b in blocks.values()) - sum(b.size for b in victims)
    if max_bytes is not None and total > max_bytes:
        gone = {b.key for b in victims}
        order = sorted(
            (b for b in blocks.values() if b.key not in gone), key=lambda b: (effective[b.key], -depth[b.key])
        )
        for b in order:
            if total <= max_bytes:
                break
            victims.append(b)
            total -= b.size
            result.evicted += 1

    removed: Dict[str, List[str]] = {}
    for b in victims:
        if _leased(b.path):
            result.leased += 1
            continue
        try:
            os.remove(b.path)
        except FileNotFoundError:
            pass
        except OSError as err:
            logger.warning("cold GC: cannot remove %s: %s", b.path, err)
            continue
        removed.setdefault(b.fingerprint, []).append(b.key)
        result.removed_bytes += b.size
        del blocks[b.key]
    if removed:  # the child markers of removed blocks (cache/cold_kids.py)
        for fp in removed:
            cold_kids.sweep(root / fp)
    dead_rows = stale + [k for keys in removed.values() for k in keys]
    if dead_rows and index is not None:
        try:
            index.delete(dead_rows)
        except Exception as err:  # noqa: BLE001 - stale rows are dropped again next time
            logger.warning("cold GC: cannot delete rows: %s", err)
    result.stale_rows = len(stale)
    for fp, (tier, snapshot) in tiers.items():
        tier.forget(removed.get(fp, []) + [k for k in stale if k in snapshot])
        tier.note_gc_run()
    result.files = len(blocks)
    result.bytes = sum(b.size for b in blocks.values())
    result.seconds = time.perf_counter() - started
    if victims or stale:
        logger.info(
            "cold GC: removed %d expired and %d LRU blocks (%d bytes), %d stale rows; "
            "%d blocks, %d bytes left",
            result.expired,
            result.evicted,
            result.removed_bytes,
            result.stale_rows,
            result.files,
            result.bytes,
        )
    return result


def _read_rows(index) -> Dict[str, Tuple[str, str, float]]:
    if index is None:
        return {}
    try:
        return index.usage()
    except Exception as err:  # noqa: BLE001 - without rows, file times stand in for last use
        logger.warning("cold GC: cannot read rows (%s); using file times", err)
        return {}


def _list_blocks(root: Path) -> Dict[str, _Block]:
    """Every block file under the root, by key hex; temp and foreign files are not blocks."""
    blocks = {}
    for model in _subdirs(root):
        if not FINGERPRINT_DIR.match(model.name):
            continue
        for shard in _subdirs(model.path):
            if not SHARD_DIR.match(shard.name):
                continue
            for f in _scan(shard.path):
                m = BLOCK_NAME.match(f.name)
                if m is None:
                    continue
                try:
                    st = f.stat()
                except OSError:
                    continue
                blocks[m.group(1)] = _Block(m.group(1), model.name, f.path, st.st_size, None, st.st_mtime)
    return blocks


def _tiers_under(root: Path) -> dict:
    """fingerprint hex -> (live tier, its snapshot) for this process's tiers under ``root``."""
    out = {}
    resolved = root.resolve()
    for tier in live_tiers():
        try:
            if Path(tier.root_dir).resolve() == resolved:
                out[tier.fingerprint_hex] = (tier, tier.snapshot())
        except OSError:
            continue
    return out


def _effective_times(blocks: Dict[str, _Block]):
    """(key -> newest last use over the block and its descendants, key -> depth in its chain)."""
    depth: Dict[str, int] = {}
    for key in blocks:
        path, k = [], key
        while k in blocks and k not in depth and len(path) <= len(blocks):
            path.append(k)
            k = blocks[k].parent
        base = depth.get(k, -1) if k in blocks else -1
        for i, p in enumerate(reversed(path)):
            depth[p] = base + 1 + i
    effective = {k: b.last_used for k, b in blocks.items()}
    for key in sorted(blocks, key=depth.__getitem__, reverse=True):
        parent = blocks[key].parent
        if parent in effective:
            effective[parent] = max(effective[parent], effective[key])
    return effective, depth


def _subdirs(path) -> list:
    return [e for e in _scan(path) if e.is_dir(follow_symlinks=False)]


def _scan(path) -> list:
    try:
        return list(os.scandir(path))
    except OSError:
        return []
