"""The cold tier's in-memory index: which blocks of one model are on disk, without disk I/O."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .block_pool import KVBlock


@dataclass
class ColdStats:
    files: int = 0  # block files indexed
    bytes: int = 0  # their size on disk
    writes: int = 0
    write_errors: int = 0  # blocks not written (disk full, read-only, directory gone, ...)
    dropped: int = 0  # blocks not queued because the write queue was full
    reads: int = 0
    read_errors: int = 0  # loads that found a corrupt, truncated or removed file
    queue_depth: int = 0
    gc_runs: int = 0
    gc_removed: int = 0
    db_errors: int = 0  # row operations that failed (the files stay valid; start-up repairs rows)
    reconcile_seconds: float = 0.0


@dataclass
class ColdEntry:
    block: KVBlock  # layers None: the KV is on disk
    file_bytes: int
    last_used: float


class ColdEntries:
    """key -> entry and parent key -> child keys for one model's block files.

    Invariants: a key is in ``children(parent)`` iff it has an entry with that parent;
    ``stats.files`` and ``stats.bytes`` count the entries and their files' size. ``add`` and
    ``remove`` run under ``lock`` (or before the writer thread starts); ``get`` reads without it
    (one dict lookup). ``dirty`` holds last-used times not yet written to the rows.
    """

    def __init__(self, stats: ColdStats):
        self.lock = threading.Lock()
        self.stats = stats
        self.dirty: Dict[bytes, float] = {}
        self._entries: Dict[bytes, ColdEntry] = {}
        self._children: Dict[bytes, set] = {}

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> List[bytes]:
        return list(self._entries)

    def get(self, key: bytes) -> Optional[ColdEntry]:
        return self._entries.get(key)

    def children(self, parent: bytes) -> List[KVBlock]:
        with self.lock:
            return [self._entries[k].block for k in self._children.get(parent, ())]

    def snapshot(self) -> Dict[str, Tuple[str, float]]:
        """key hex -> (parent hex, last used) for every entry."""
        with self.lock:
            return {k.hex(): (e.block.parent.hex(), e.last_used) for k, e in self._entries.items()}

    def used(self, entry: ColdEntry, t: float) -> None:
        entry.last_used = t
        self.dirty[entry.block.key] = t

    def take_dirty(self) -> Dict[bytes, float]:
        dirty, self.dirty = self.dirty, {}
        return dirty

    def add(self, block: KVBlock, file_bytes: int, last_used: float) -> None:
        if block.key in self._entries:
            return
        self._entries[block.key] = ColdEntry(block, file_bytes, last_used)
        self._children.setdefault(block.parent, set()).add(block.key)
        self.stats.files += 1
        self.stats.bytes += file_bytes

    def remove(self, key: bytes) -> bool:
        e = self._entries.pop(key, None)
        if e is None:
            return False
        siblings = self._children.get(e.block.parent)
        if siblings is not None:
            siblings.discard(key)
            if not siblings:
                del self._children[e.block.parent]
        self.dirty.pop(key, None)
        self.stats.files -= 1
        self.stats.bytes -= e.file_bytes
        return True
