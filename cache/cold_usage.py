"""What the cold tier holds per model, and removing it: the data behind `omlx cache`.

Works on the cold-cache root from outside any engine (no mlx import). ``usage`` lists, per model
fingerprint directory, the block files on disk and their rows (cache/cold_index.py), and the model folder that
wrote them (``model.json``, recorded since names were; older directories have none). ``clear``
removes blocks in GC's order (cache/gc.py): the file, then its row, so a crash half way leaves
files without rows (re-indexed at the next start) or rows without files (dropped at the next
start), never a row that names a file with other contents. A ColdTier of this process (a loaded
model) is told which blocks went; one of another process that still indexes a removed block finds
the file missing at load: a miss, never a wrong hit.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from . import block_file, cold_index, cold_kids, durable, gc
from .block_file import BLOCK_NAME, FINGERPRINT_DIR, MODEL_INFO, SHARD_DIR, TMP_NAME


@dataclass
class ModelUsage:
    """One model fingerprint's share of the cold tier."""

    fingerprint: str
    model_path: Optional[str] = None  # the folder that wrote the blocks (model.json)
    files: int = 0  # block files on disk
    bytes: int = 0  # their size
    rows: int = 0  # CacheBlock rows
    row_bytes: int = 0  # the file sizes the rows record
    tokens: int = 0  # tokens the rows hold
    last_used: Optional[float] = None  # newest row's last use (POSIX seconds)
    info: dict = field(default_factory=dict)  # model.json as written


@dataclass
class ClearResult:
    fingerprints: List[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    rows: int = 0
    forgotten: int = 0  # removed blocks that a live cold tier of this process indexed


def usage(root) -> List[ModelUsage]:
    """Every fingerprint with block files or rows, sorted by fingerprint."""
    root = Path(root).expanduser()
    found: Dict[str, ModelUsage] = {}
    for model in durable.scandir(root):
        if FINGERPRINT_DIR.match(model.name) and model.is_dir(follow_symlinks=False):
            u = found.setdefault(model.name, ModelUsage(model.name))
            u.info = read_model_info(root / model.name)
            u.model_path = u.info.get("path")
            for path, size in _block_files(model.path):
                u.files += 1
                u.bytes += size
    for fp, (count, nbytes, tokens, last) in _row_totals().items():
        u = found.setdefault(fp, ModelUsage(fp))
        u.rows, u.row_bytes, u.tokens, u.last_used = count, nbytes, tokens, last
    return [found[k] for k in sorted(found)]


def read_model_info(directory: Path) -> dict:
    try:
        info = json.loads((Path(directory) / MODEL_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def clear(root, fingerprints: Iterable[str]) -> ClearResult:
    """Remove every block of these fingerprints: files, then rows, then the emptied directory."""
    root = Path(root).expanduser()
    result = ClearResult()
    index = cold_index.installed()
    for fp in fingerprints:
        if not FINGERPRINT_DIR.match(fp):
            raise ValueError(f"{fp!r} is not a model fingerprint")
        directory = root / fp
        removed = []
        for path, size in _block_files(directory):
            if durable.remove(path):
                removed.append(BLOCK_NAME.match(path.name).group(1))
                result.files += 1
                result.bytes += size
        if index is not None:
            # Rows of removed files, and rows whose file is gone anyway; a block a live server
            # wrote meanwhile keeps its file and its row.
            rows = index.rows_for(fp)
            dead = [k for k, r in rows.items() if k in removed or not (root / r.file).exists()]
            index.delete(dead)
            result.rows += len(dead)
            removed = sorted(set(removed) | set(dead))
        _tidy(directory)
        result.forgotten += _tell_live_tiers(root, fp, removed)
        result.fingerprints.append(fp)
    return result


def _tell_live_tiers(root: Path, fingerprint: str, removed: List[str]) -> int:
    """This process's ColdTier of the fingerprint (a loaded model) stops offering the removed
    blocks at once; a tier in another process finds them missing at load (a miss)."""
    forgotten = 0
    if not removed:
        return 0
    for tier in gc.live_tiers():
        try:
            same_root = Path(tier.root_dir).resolve() == root.resolve()
        except OSError:
            continue
        if same_root and tier.fingerprint_hex == fingerprint:
            forgotten += tier.forget(removed, by_gc=False)
    return forgotten


def _block_files(directory) -> List[tuple]:
    out = []
    for shard in durable.scandir(directory):
        if not (SHARD_DIR.match(shard.name) and shard.is_dir(follow_symlinks=False)):
            continue
        for f in durable.scandir(shard.path):
            if BLOCK_NAME.match(f.name) and f.name[:2] == shard.name:
                try:
                    out.append((Path(f.path), f.stat(follow_symlinks=False).st_size))
                except OSError:
                    continue
    return out


def _row_totals() -> Dict[str, tuple]:
    """fingerprint -> (rows, recorded bytes, tokens, newest last use)."""
    index = cold_index.installed()
    return index.totals() if index is not None else {}


def _tidy(directory: Path) -> None:
    """After the blocks: dead writers' temp files, model.json, empty shards, the directory if
    empty. A live writer's temp file and any block written meanwhile stay (and so does the
    directory)."""
    for shard in durable.scandir(directory):
        if SHARD_DIR.match(shard.name) and shard.is_dir(follow_symlinks=False):
            for f in durable.scandir(shard.path):
                t = TMP_NAME.match(f.name)
                if t is not None and block_file.tmp_writer_gone(t, f.path):
                    durable.remove(f.path)
            try:
                os.rmdir(shard.path)
            except OSError:
                pass
    cold_kids.sweep(directory)  # the markers of the removed blocks
    if not any(SHARD_DIR.match(e.name) for e in durable.scandir(directory)):
        durable.remove(directory / MODEL_INFO)
        for e in durable.scandir(directory):  # model.json temp files of crashed writers
            if e.name.startswith(MODEL_INFO + ".") and e.is_file(follow_symlinks=False):
                durable.remove(e.path)
        try:
            os.rmdir(directory)
        except OSError:
            pass
