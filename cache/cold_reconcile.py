"""Start-up of a cold tier: its directory proven writable, and its index rebuilt from the files.

The files are the truth. ``reconcile`` indexes every block file: from its row when it has one (a
row is written only after its file is complete, so no file is opened), else from its header if
valid (and gives it a row), else removes it. It removes dead writers' temp files and foreign files
and deletes rows without a file. After it, a row exists iff its file does.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Dict

from . import block_file, durable
from .block_file import BLOCK_NAME, SHARD_DIR, TMP_NAME, InvalidBlockFile
from .block_pool import KVBlock
from .cold_index import Row

logger = logging.getLogger("omlx.cache.cold")


def prepare_dir(directory) -> None:
    """Create the model's directory and prove it writable, or raise OSError."""
    durable.make_dirs(directory)
    probe = directory / f".probe-{os.getpid()}-{threading.get_ident()}"
    with open(probe, "wb") as f:
        f.write(b"omlx")
    os.remove(probe)


def write_model_info(tier, info: dict) -> None:
    """Record which model folder these blocks belong to (``model.json``, for `omlx cache`: a
    fingerprint alone does not say). Best effort: the cache works without it."""
    final = tier.dir / block_file.MODEL_INFO
    tmp = tier.dir / block_file.tmp_name(block_file.MODEL_INFO, next(tier.tmp_names))
    body = json.dumps(dict(info, fingerprint=tier.fingerprint_hex), sort_keys=True).encode() + b"\n"
    try:
        durable.write_atomically(final, tmp, lambda f: f.write(body))
    except OSError as err:
        tier.log_once("model-info", err)


def reconcile(tier) -> None:
    """Fill ``tier.entries`` from the files under ``tier.dir`` and repair the rows (see the module
    docstring). Runs before the tier's writer starts."""
    started = time.perf_counter()
    stats, entries = tier.stats, tier.entries
    rows: Dict[str, Row] = {}
    if tier.index is not None:
        try:
            rows = tier.index.rows_for(tier.fingerprint_hex)
        except Exception as err:  # noqa: BLE001
            tier.log_once("db-read", err)
            stats.db_errors += 1
            tier.index = None
    bad, new_rows, bad_rows = 0, [], []
    for shard in durable.scandir(tier.dir):
        if not (SHARD_DIR.match(shard.name) and shard.is_dir(follow_symlinks=False)):
            continue
        for f in durable.scandir(shard.path):
            m = BLOCK_NAME.match(f.name)
            if m is None or f.name[:2] != shard.name:
                t = TMP_NAME.match(f.name)
                if t is None or block_file.tmp_writer_gone(t, f.path):
                    bad += durable.remove(f.path, log=None if t else "foreign file")
                continue
            key_hex = m.group(1)
            row = rows.pop(key_hex, None)
            if row is not None:
                entry = row.block()
                if entry is not None:
                    entries.add(entry, row.bytes, row.last_used)
                    continue
                bad_rows.append(key_hex)  # unusable (e.g. older than migration 0002): re-read
            try:
                h = block_file.read_header(f.path, tier.fingerprint_hex, key_hex, tier.kinds, tier.kv)
            except (OSError, InvalidBlockFile) as err:
                logger.warning("cold tier: removing bad block file %s: %s", f.path, err)
                bad += durable.remove(f.path)
                continue
            entry = KVBlock(h.key, h.parent, h.token_ids, None, h.tensor_bytes)
            new_rows.append(Row.of(entry, tier.fingerprint_hex, h.file_bytes, h.mtime))
            entries.add(entry, h.file_bytes, h.mtime)
    if rows or bad_rows:
        tier.db_call("delete", list(rows) + bad_rows)
    if new_rows:
        tier.db_call("insert", new_rows)
    stats.reconcile_seconds = time.perf_counter() - started
    logger.info(
        "cold tier %s: %d blocks, %d bytes; re-indexed %d files without rows, dropped %d "
        "rows without files, removed %d bad files, in %.3f s",
        tier.dir,
        stats.files,
        stats.bytes,
        len(new_rows),
        len(rows),
        bad,
        stats.reconcile_seconds,
    )
