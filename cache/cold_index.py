"""The cold tier's durable index: one row per block file, behind a small protocol.

The block files are the truth (each header carries the block's full metadata); the rows are a
queryable mirror kept for last-used times across restarts, for GC, for `omlx cache` and the admin
console, and so that a restart rebuilds the in-memory index without opening every file. The core
(cold tier, GC, usage and clearing) only sees ``ColdIndex``; the Django app installs its
implementation over the CacheBlock table when it starts (cache/apps.py, cache/orm_index.py). With
no index installed the cold tier works from the files alone.

Every operation may fail without losing a block: callers log, count and carry on, and the next
reconciliation repairs the rows. Times cross this protocol as POSIX seconds (floats).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Protocol, Tuple

from . import block_file
from .block_pool import KVBlock


@dataclass(frozen=True)
class Row:
    key: str
    parent: str
    fingerprint: str
    token_count: int
    token_ids: str  # base64 of little-endian uint32 (block_file.encode_tokens)
    file: str
    bytes: int
    kv_bytes: int
    created: float
    last_used: float

    @classmethod
    def of(cls, block: KVBlock, fingerprint: str, file_bytes: int, t: float) -> "Row":
        key = block.key.hex()
        return cls(
            key,
            block.parent.hex(),
            fingerprint,
            block.num_tokens,
            block_file.encode_tokens(block.token_ids),
            block_file.relative_path(fingerprint, key),
            file_bytes,
            block.nbytes,
            t,
            t,
        )

    def block(self) -> Optional[KVBlock]:
        """The index entry this row describes (layers None), or None if the row is unusable
        (e.g. made before migration 0002, without token ids)."""
        try:
            tokens = block_file.decode_tokens(self.token_ids)
            key, parent = bytes.fromhex(self.key), bytes.fromhex(self.parent)
        except ValueError:
            return None
        if not tokens or len(tokens) != self.token_count or self.kv_bytes <= 0:
            return None
        return KVBlock(key, parent, tokens, None, self.kv_bytes)


class ColdIndex(Protocol):
    """Rows of block files, keyed by block key hex. A key has at most one row."""

    def rows_for(self, fingerprint: str) -> Dict[str, Row]:
        """Rows of one model, by key hex."""

    def usage(self) -> Dict[str, Tuple[str, str, float]]:
        """key hex -> (parent hex, fingerprint hex, last used) for every row: what GC needs."""

    def totals(self) -> Dict[str, Tuple[int, int, int, Optional[float]]]:
        """fingerprint -> (rows, recorded bytes, tokens, newest last use)."""

    def insert(self, rows: Iterable[Row]) -> None:
        """Insert rows; a key that already has a row keeps it."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete the rows of these keys; keys without a row are skipped."""

    def touch(self, last_used: Dict[str, float]) -> None:
        """Persist last-used times in one transaction; keys without a row are skipped."""

    def close_thread(self) -> None:
        """Release this thread's resources (a worker thread calls it before it ends)."""


_installed: Optional[ColdIndex] = None
_lock = threading.Lock()


def install(index: Optional[ColdIndex]) -> None:
    """Make ``index`` the one this process's cold tiers, GC and usage use (None: files only).
    Cold tiers opened before keep the index they started with."""
    global _installed
    with _lock:
        _installed = index


def installed() -> Optional[ColdIndex]:
    return _installed
