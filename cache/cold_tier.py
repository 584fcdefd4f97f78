"""The cold tier: KV blocks as safetensors files on SSD that survive restarts."""

from __future__ import annotations

import atexit
import itertools
import logging
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import mlx.core as mx

from . import block_file, cold_index, cold_kids, durable, gc
from .block_file import BlockHeader, InvalidBlockFile
from .block_key import ModelFingerprint
from .block_pool import KVBlock
from .cold_entries import ColdEntries, ColdStats
from .cold_index import ColdIndex
from .cold_quant import ColdQuantizer
from .cold_reconcile import prepare_dir, reconcile, write_model_info
from .cold_writer import ColdWriter
from .layout import FULL, STATE, CacheLayout, parse_tags

logger = logging.getLogger("omlx.cache.cold")


class ColdTier:
    """Blocks of one model in ``root_dir/<fingerprint.hex>/``, one safetensors file each.

    The in-memory index (``entries``, cache/cold_entries.py) answers ``contains``, ``entry`` and
    ``children``. At start it is built from the block files present (cache/cold_reconcile.py).
    Afterwards it gains the blocks this instance writes, and those ``contains`` and ``children``
    find on disk (written by another process sharing the folder: one failed open per miss, and the
    child markers of cache/cold_kids.py for the last block of a chain), and loses those it
    finds bad and those GC removes. ``put`` never blocks the caller: a writer thread
    (cache/cold_writer.py) drains a bounded queue, drops blocks when it is full, starts no write
    while the engine computes prompts (``defer_writes``), and writes crash-safely: temp file ->
    fsync -> rename -> fsync directory -> row. ``load`` checks the header and the tensors against
    the index before returning anything and removes what fails, so a wrong row or file is only
    ever a miss. Rows go to ``index`` (cache/cold_index.py; the one installed when the tier opens,
    None: files only). Any disk or database failure is logged once per kind, counted, and turns
    into a miss or a dropped block; nothing here raises into the engine.
    """

    def __init__(
        self,
        root_dir,
        fingerprint: ModelFingerprint,
        max_queue: int = 64,
        model_info: Optional[dict] = None,
        layout: Optional[CacheLayout] = None,
        store_kv: str = "",
    ):
        """``store_kv`` (``q<bits>g<group>``): a float model's blocks are quantized on disk
        (cache/cold_quant.py); a model whose KV is quantized already stores it as it is."""
        self.root_dir = Path(root_dir).expanduser()
        self.fingerprint = fingerprint
        self.kinds = layout.tags if layout is not None else ""  # block files' "kinds" metadata
        own_kv = layout.kv if layout is not None else ""
        self.kv = own_kv or store_kv  # the block files' "kv" (KV format)
        self.quantizer = ColdQuantizer(store_kv) if store_kv and not own_kv else None
        self.fingerprint_hex = fingerprint.hex
        self.dir = self.root_dir / self.fingerprint_hex
        self.enabled = False
        self.index: Optional[ColdIndex] = None
        self._stats = ColdStats()
        self.entries = ColdEntries(self._stats)
        self.tmp_names = itertools.count()
        self._logged: set = set()
        self.writer = ColdWriter(self, max_queue)
        try:
            prepare_dir(self.dir)
        except OSError as e:
            logger.warning("cold tier disabled: cannot use %s (%s); KV blocks stay in RAM only", self.dir, e)
            return
        if model_info:
            write_model_info(self, model_info)
        self.index = cold_index.installed()
        reconcile(self)
        self.enabled = True
        self.writer.start()
        gc.register(self)

    # -- the index --------------------------------------------------------------------------------

    @property
    def stats(self) -> ColdStats:
        self._stats.queue_depth = self.writer.depth
        return self._stats

    def contains(self, key: bytes) -> bool:
        return key in self.entries or (self.enabled and self._discover(key))

    def _discover(self, key: bytes, parent: Optional[bytes] = None) -> bool:
        """Whether another process sharing the folder (a worker on another machine: docs/
        operations.md) wrote this block since the index was built: one failed open when not. A
        block found is indexed in memory (its row waits for the next start's reconciliation).
        With ``parent`` (the block was named by a child marker), a block under another parent is
        not indexed, and the marker of a block whose file is gone or unusable is removed."""
        key_hex = key.hex()
        path = self.dir / key_hex[:2] / f"{key_hex}{block_file.SUFFIX}"
        try:
            h = block_file.read_header(path, self.fingerprint_hex, key_hex, self.kinds, self.kv)
        except (OSError, InvalidBlockFile) as err:  # absent (the usual miss), or not usable: a miss
            if parent is not None and isinstance(err, (FileNotFoundError, InvalidBlockFile)):
                cold_kids.unlink(self.dir, parent, key)
            return False
        if parent is not None and h.parent != parent:  # a marker in the wrong place
            cold_kids.unlink(self.dir, parent, key)
            return False
        with self.entries.lock:
            self.entries.add(
                KVBlock(h.key, h.parent, h.token_ids, None, h.tensor_bytes), h.file_bytes, h.mtime
            )
        return True

    def entry(self, key: bytes) -> Optional[KVBlock]:
        e = self.entries.get(key)
        return e.block if e is not None else None

    def children(self, parent: bytes) -> List[KVBlock]:
        """The indexed blocks under ``parent``, and those other processes sharing the folder
        wrote there since (their child markers, cache/cold_kids.py: one failed open when none)."""
        if self.enabled:
            for child in cold_kids.listed(self.dir, parent):
                if child not in self.entries:
                    self._discover(child, parent)
        return self.entries.children(parent)

    # -- reads ------------------------------------------------------------------------------------

    def load(self, key: bytes) -> Optional[list]:
        """One (keys, values) pair per layer, checked against the index, or None."""
        e = self.entries.get(key)
        if e is None:
            return None
        key_hex = key.hex()
        path = self.dir / key_hex[:2] / f"{key_hex}{block_file.SUFFIX}"
        try:
            gc.lease(path)  # while it is read, GC in any process sharing the folder spares it
            try:
                header = block_file.read_header(path, self.fingerprint_hex, key_hex, self.kinds, self.kv)
                if header.token_ids != e.block.token_ids or header.parent != e.block.parent:
                    raise InvalidBlockFile("file names other tokens than when it was indexed")
                layers = _load_layers(path, header)
            finally:
                gc.release(path)
            if self.quantizer is not None:
                layers = self.quantizer.decode(layers, header.kinds, header.dtype)
                mx.eval([a for layer in layers for a in layer])
        except FileNotFoundError:
            logger.info("cold block %s is gone (removed outside this process)", key_hex[:16])
            self._discard(key, remove_file=False)
            return None
        except OSError as err:  # may pass (EMFILE, EIO): a miss, but keep the file
            self.log_once("read", err)
            self._stats.read_errors += 1
            return None
        except Exception as err:  # noqa: BLE001 - InvalidBlockFile, or mlx failing to parse it
            logger.warning("cold block %s is bad and was removed: %s", key_hex[:16], err)
            self._discard(key, remove_file=True)
            return None
        self.entries.used(e, time.time())
        self._stats.reads += 1
        return layers

    def layer_kinds(self, num_layers: int) -> tuple:
        """(kind, count) per layer of this tier's blocks."""
        return parse_tags(self.kinds) if self.kinds else ((FULL, 0),) * num_layers

    # -- writes -----------------------------------------------------------------------------------

    def put(self, block: KVBlock, wait: bool = False) -> None:
        """Queue a block for writing. A full queue drops the block, or with ``wait`` (a model
        being unloaded) waits for the writer to make room."""
        if not self.enabled or block.layers is None:
            return
        self.writer.put(block, wait)

    def defer_writes(self, busy: bool) -> None:
        """The engine computes prompts (True) or no longer does (False). Meanwhile the writer
        starts no block queued less than a second ago: writing (serialising, fsyncs) takes CPU
        the prefill needs (docs/benchmarks.md, "SSD tier: what writing through costs"). What a
        write does, and in which order, is unchanged; only when it starts moves."""
        self.writer.defer(busy)

    def flush(self) -> None:
        """Wait until every queued block is written and pending row updates are done."""
        self.writer.flush()

    def close(self) -> None:
        """Write everything queued, persist last-used times, stop the writer. Idempotent."""
        gc.unregister(self)
        self.enabled = False
        self.writer.close()

    # -- used by GC ---------------------------------------------------------------------------------

    def snapshot(self) -> Dict[str, Tuple[str, float]]:
        """key hex -> (parent hex, last used) for every indexed block."""
        return self.entries.snapshot()

    def forget(self, key_hexes: List[str], by_gc: bool = True) -> int:
        """GC (or a clear from the admin console, ``by_gc`` False) removed these blocks' files
        and rows; returns how many were indexed."""
        removed = 0
        with self.entries.lock:
            for key_hex in key_hexes:
                if self.entries.remove(bytes.fromhex(key_hex)):
                    removed += 1
        if by_gc:
            self._stats.gc_removed += removed
        return removed

    def note_gc_run(self) -> None:
        self._stats.gc_runs += 1

    # -- for the writer and reconciliation ------------------------------------------------------------

    def db_call(self, op: str, arg) -> None:
        """``index.<op>(arg)``; a failure is logged and counted (rows are a mirror; start-up
        repairs them)."""
        if self.index is None:
            return
        try:
            getattr(self.index, op)(arg)
        except Exception as err:  # noqa: BLE001
            self.log_once(f"db-{op}", err)
            self._stats.db_errors += 1

    def log_once(self, op: str, err: BaseException) -> None:
        kind = (op, type(err).__name__, getattr(err, "errno", None))
        if kind in self._logged:
            logger.debug("cold tier %s error: %s", op, err)
            return
        self._logged.add(kind)
        logger.warning(
            "cold tier %s error (%s); the block is skipped, further errors of this kind "
            "are logged at debug level: %s",
            op,
            self.dir,
            err,
        )

    def _discard(self, key: bytes, remove_file: bool) -> None:
        """Forget a block that failed to load; its file goes first, then (on the writer) its row."""
        key_hex = key.hex()
        if remove_file:
            durable.remove(self.dir / key_hex[:2] / f"{key_hex}{block_file.SUFFIX}")
        with self.entries.lock:
            self.entries.remove(key)
            self.writer.drop_row(key_hex)
        self._stats.read_errors += 1


def _load_layers(path: Path, header: BlockHeader) -> list:
    """The tensors of a file whose header was just checked, checked against that header."""
    arrays, meta = mx.load(str(path), return_metadata=True)
    n = len(header.token_ids)
    expected = (header.key.hex(), block_file.encode_tokens(header.token_ids))
    if (meta.get("key"), meta.get("tokens")) != expected:
        raise InvalidBlockFile("file changed while it was read")
    layers = []
    names_of = block_file.tensor_names(header.kinds, header.kv)
    for i, ((kind, count), names) in enumerate(zip(header.kinds, names_of)):
        layer = tuple(arrays[name] for name in names)
        if kind != STATE:
            stored = n if kind == FULL else min(n, count)
            for a in layer:
                if a.ndim != 4 or a.shape[0] != 1 or a.shape[2] != stored:
                    raise InvalidBlockFile(f"layer {i} has shape {a.shape} for {n} tokens")
        layers.append(layer)
    mx.eval([a for layer in layers for a in layer])  # read now, so I/O errors surface here
    return layers


@atexit.register
def _close_live_tiers() -> None:
    # Finish writes before the interpreter tears down mlx under a daemon writer thread.
    for tier in gc.live_tiers():
        tier.close()
