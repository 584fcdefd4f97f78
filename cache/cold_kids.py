"""Child markers: how a cold tier finds the blocks that other processes wrote under a parent.

A lookup finds a whole block by its key (``ColdTier.contains``: one open of the file its key
names), but the last block of a hit is found through its parent: a partly filled block (the tail
of a prompt) or a block whose tokens diverge part-way, whose key the reader cannot compute since
it does not know how many of its own tokens the block holds. The in-memory index knows the
children this process wrote or indexed at start; for blocks written since by another process
sharing the folder (a worker on another machine: docs/operations.md), every writer leaves an empty
marker file per block::

    <fingerprint.hex>/kids/<parent_hex[:2]>/<parent_hex>/<child_hex>

made after the block's file is complete (so a marker never announces a file still being written)
and listed by readers where a chain ends. A marker is a hint, never trusted: only its name is
used (64 hex digits, else ignored), at most ``MAX_LISTED`` per parent, and the block it names is
indexed only if its file's header passes every check (cache/block_file.py) and names that parent;
its tensors are checked again when loaded. A marker lost in a crash costs a miss until the next
start (which indexes every block file); a marker whose block is gone is removed by the reader
that finds it so, and by GC and clearing (``sweep``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List

from . import block_file, durable

DIR = "kids"
KEY_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_LISTED = 256  # markers read per parent and lookup (a hostile folder cannot make lookups slow)


def parent_dir(tier_dir: Path, parent_hex: str) -> Path:
    return tier_dir / DIR / parent_hex[:2] / parent_hex


def link(tier_dir: Path, parent: bytes, child: bytes) -> None:
    """Leave the marker of ``child`` under ``parent`` (its block file is complete). Raises OSError."""
    folder = parent_dir(tier_dir, parent.hex())
    for attempt in range(2):
        try:
            if not folder.is_dir():
                if not tier_dir.is_dir():  # cleared or unmounted: never recreated here
                    raise FileNotFoundError(str(tier_dir))
                os.makedirs(folder, exist_ok=True)  # no fsync: a marker is a hint (see above)
            fd = os.open(folder / child.hex(), os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            return
        except FileNotFoundError:  # a sweep removed the empty folder meanwhile: once more
            if attempt or not tier_dir.is_dir():
                raise


def listed(tier_dir: Path, parent: bytes) -> List[bytes]:
    """The child keys marked under ``parent`` (none when its folder is absent: one failed open)."""
    out = []
    for name in _names(parent_dir(tier_dir, parent.hex())):
        if KEY_HEX.match(name):
            out.append(bytes.fromhex(name))
            if len(out) >= MAX_LISTED:
                break
    return out


def unlink(tier_dir: Path, parent: bytes, child: bytes) -> None:
    durable.remove(parent_dir(tier_dir, parent.hex()) / child.hex())


def sweep(tier_dir: Path) -> int:
    """Remove the markers whose block file is gone (GC or clearing removed it), foreign files
    among them, and empty folders; returns how many went. A block's file is complete before its
    marker is made, so a marker listed here whose file is absent names a removed block."""
    removed = 0
    for shard in durable.scandir(tier_dir / DIR):
        for parent in durable.scandir(shard.path):
            if not parent.is_dir(follow_symlinks=False):
                removed += durable.remove(parent.path)
                continue
            for f in durable.scandir(parent.path):
                if KEY_HEX.match(f.name) and _block_exists(tier_dir, f.name):
                    continue
                if not f.is_dir(follow_symlinks=False):
                    removed += durable.remove(f.path)
            _rmdir(parent.path)
        _rmdir(shard.path)
    _rmdir(tier_dir / DIR)
    return removed


def _block_exists(tier_dir: Path, key_hex: str) -> bool:
    return os.path.lexists(tier_dir / key_hex[:2] / f"{key_hex}{block_file.SUFFIX}")


def _names(folder: Path) -> List[str]:
    out = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                out.append(e.name)
                if len(out) >= 4 * MAX_LISTED:  # never read a huge hostile folder to its end
                    break
    except OSError:
        pass
    return out


def _rmdir(path) -> None:
    try:
        os.rmdir(path)  # only when empty: a marker made meanwhile keeps its folder
    except OSError:
        pass
