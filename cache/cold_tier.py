"""The cold tier: KV blocks as safetensors files on SSD that survive restarts."""
from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import mlx.core as mx

from . import block_file, cold_rows, durable, gc
from .block_file import BLOCK_NAME, SHARD_DIR, TMP_NAME, BlockHeader, InvalidBlockFile
from .block_key import ModelFingerprint, block_key
from .block_pool import KVBlock
from .layout import FULL, STATE, CacheLayout, parse_tags

logger = logging.getLogger("omlx.cache.cold")

_PERSIST_EVERY = 30.0  # seconds between batched last-used updates of the rows
_STOP, _SYNC = object(), object()
# The longest a queued block waits for the engine to stop computing prompts before it is written
# anyway (a long prefill must not fill the queue until blocks are dropped).
_MAX_DEFER = 1.0


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
class _Entry:
    block: KVBlock  # layers None: the KV is on disk
    file_bytes: int
    last_used: float


class ColdTier:
    """Blocks of one model in ``root_dir/<fingerprint.hex>/``, one safetensors file each.

    The in-memory index (key -> entry, parent -> child keys) answers ``contains``, ``entry`` and
    ``children`` without disk I/O. At start it is built from the block files present: from a
    file's row when it has one (a row is written only after its file is complete, so no file is
    opened), else from the file's header if valid. Afterwards it gains the blocks this instance
    writes and loses those it finds bad and those GC removes. ``put`` never blocks the caller: a
    writer thread drains a bounded queue and drops blocks when it is full; it starts no write
    while the engine computes prompts (``defer_writes``, for at most ``_MAX_DEFER``). A write is crash-safe
    (temp file -> fsync -> rename -> fsync directory -> row; cache/durable.py), so a block file
    exists complete or not at all. ``load`` checks the header and the tensors against the index
    before returning anything and removes what fails, so a wrong row or file is only ever a
    miss. Any disk or database failure is logged once per kind, counted, and turns into a miss or
    a dropped block; nothing here raises into the engine.
    """

    def __init__(self, root_dir, fingerprint: ModelFingerprint, max_queue: int = 64,
                 model_info: Optional[dict] = None, layout: Optional[CacheLayout] = None):
        self.root_dir = Path(root_dir).expanduser()
        self.fingerprint = fingerprint
        self.kinds = layout.tags if layout is not None else ""  # block files' "kinds" metadata
        self.fingerprint_hex = fingerprint.hex
        self.dir = self.root_dir / self.fingerprint_hex
        self.enabled = False
        self._stats = ColdStats()
        self._lock = threading.Lock()
        self._entries: Dict[bytes, _Entry] = {}
        self._children: Dict[bytes, set] = {}
        self._pending: set = set()  # keys queued, not yet written
        self._dirty: Dict[bytes, float] = {}  # last-used times not yet persisted
        self._dead_rows: List[str] = []  # rows whose files load() removed
        self._logged: set = set()
        self._tmp_names = itertools.count()
        self._queue: "queue.Queue" = queue.Queue(max(1, max_queue))
        self._engine_idle = threading.Event()  # cleared while the engine computes prompts
        self._engine_idle.set()
        self._hurry_lock = threading.Lock()
        self._hurry = 0  # flush/close/put(wait=True) in progress: write without waiting
        self._thread: Optional[threading.Thread] = None
        try:
            self._prepare_dir()
        except OSError as e:
            logger.warning("cold tier disabled: cannot use %s (%s); KV blocks stay in RAM only",
                           self.dir, e)
            return
        if model_info:
            self._write_model_info(model_info)
        self._db = cold_rows.ensure_django()
        self._reconcile()
        self.enabled = True
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"omlx-cold-{self.fingerprint_hex[:8]}")
        self._thread.start()
        gc.register(self)

    # -- the index --------------------------------------------------------------------------------

    @property
    def stats(self) -> ColdStats:
        self._stats.queue_depth = self._queue.qsize()
        return self._stats

    def contains(self, key: bytes) -> bool:
        return key in self._entries

    def entry(self, key: bytes) -> Optional[KVBlock]:
        e = self._entries.get(key)
        return e.block if e is not None else None

    def children(self, parent: bytes) -> List[KVBlock]:
        with self._lock:
            return [self._entries[k].block for k in self._children.get(parent, ())]

    # -- reads ------------------------------------------------------------------------------------

    def load(self, key: bytes) -> Optional[list]:
        """One (keys, values) pair per layer, checked against the index, or None."""
        e = self._entries.get(key)
        if e is None:
            return None
        key_hex = key.hex()
        path = self.dir / key_hex[:2] / f"{key_hex}{block_file.SUFFIX}"
        try:
            header = block_file.read_header(path, self.fingerprint_hex, key_hex, self.kinds)
            if header.token_ids != e.block.token_ids or header.parent != e.block.parent:
                raise InvalidBlockFile("file names other tokens than when it was indexed")
            layers = _load_layers(path, header)
        except FileNotFoundError:
            logger.info("cold block %s is gone (removed outside this process)", key_hex[:16])
            self._discard(key, remove_file=False)
            return None
        except OSError as err:  # may pass (EMFILE, EIO): a miss, but keep the file
            self._log_once("read", err)
            self._stats.read_errors += 1
            return None
        except Exception as err:  # noqa: BLE001 - InvalidBlockFile, or mlx failing to parse it
            logger.warning("cold block %s is bad and was removed: %s", key_hex[:16], err)
            self._discard(key, remove_file=True)
            return None
        e.last_used = time.time()
        self._dirty[key] = e.last_used
        self._stats.reads += 1
        return layers

    # -- writes -----------------------------------------------------------------------------------

    def put(self, block: KVBlock, wait: bool = False) -> None:
        """Queue a block for writing. A full queue drops the block, or with ``wait`` (a model
        being unloaded) waits for the writer to make room.

        The arrays are made contiguous and evaluated here, on the caller's (the engine's) thread,
        a no-op for the block cache's own blocks, so the writer thread never computes with MLX.
        """
        if not self.enabled or block.layers is None:
            return
        with self._lock:
            if block.key in self._entries or block.key in self._pending:
                return
            self._pending.add(block.key)
        layers = [tuple(mx.contiguous(a) for a in layer) for layer in block.layers]
        mx.eval(layers)
        try:
            item = (KVBlock(block.key, block.parent, tuple(block.token_ids), layers, block.nbytes),
                    time.monotonic())
            if wait:
                with self._hurrying():
                    self._queue.put(item)
            else:
                self._queue.put(item, block=False)
        except queue.Full:
            with self._lock:
                self._pending.discard(block.key)
            self._stats.dropped += 1

    def defer_writes(self, busy: bool) -> None:
        """The engine computes prompts (True) or no longer does (False). Meanwhile the writer
        starts no block queued less than ``_MAX_DEFER`` seconds ago: writing (serialising,
        fsyncs) takes CPU the prefill needs (docs/benchmarks.md, "SSD tier: what writing through
        costs"). What a write does, and in which order, is unchanged; only when it starts moves."""
        with self._hurry_lock:
            if busy and not self._hurry:
                self._engine_idle.clear()
            else:
                self._engine_idle.set()

    @contextlib.contextmanager
    def _hurrying(self):
        """Someone waits for the writer: it writes without waiting for the engine meanwhile."""
        with self._hurry_lock:
            self._hurry += 1
            self._engine_idle.set()
        try:
            yield
        finally:
            with self._hurry_lock:
                self._hurry -= 1

    def flush(self) -> None:
        """Wait until every queued block is written and pending row updates are done."""
        if self._thread is not None and self._thread.is_alive():
            with self._hurrying():
                self._queue.put(_SYNC)
                self._queue.join()

    def close(self) -> None:
        """Write everything queued, persist last-used times, stop the writer. Idempotent."""
        gc.unregister(self)
        self.enabled = False
        if self._thread is not None and self._thread.is_alive():
            with self._hurry_lock:
                self._hurry += 1  # for good
            self._engine_idle.set()
            self._queue.put(_STOP)
            self._thread.join()
        self._thread = None

    # -- used by GC ---------------------------------------------------------------------------------

    def snapshot(self) -> Dict[str, Tuple[str, float]]:
        """key hex -> (parent hex, last used) for every indexed block."""
        with self._lock:
            return {k.hex(): (e.block.parent.hex(), e.last_used) for k, e in self._entries.items()}

    def forget(self, key_hexes: List[str], by_gc: bool = True) -> int:
        """GC (or a clear from the admin console, ``by_gc`` False) removed these blocks' files
        and rows; returns how many were indexed."""
        removed = 0
        with self._lock:
            for key_hex in key_hexes:
                if self._unindex(bytes.fromhex(key_hex)):
                    removed += 1
        if by_gc:
            self._stats.gc_removed += removed
        return removed

    def note_gc_run(self) -> None:
        self._stats.gc_runs += 1

    # -- the writer thread --------------------------------------------------------------------------

    def _run(self) -> None:
        last_persist = time.monotonic()
        try:
            while True:
                try:
                    item = self._queue.get(timeout=_PERSIST_EVERY)
                except queue.Empty:
                    item = None
                try:
                    if isinstance(item, tuple):
                        block, queued_at = item
                        self._wait_for_engine(queued_at)
                        self._write(block)
                    self._drop_dead_rows()
                    due = time.monotonic() - last_persist > _PERSIST_EVERY
                    if item is None or item is _SYNC or due:
                        self._persist_last_used()
                        last_persist = time.monotonic()
                except Exception as err:  # noqa: BLE001 - the writer must outlive any error
                    self._log_once("writer", err)
                finally:
                    if item is not None:
                        self._queue.task_done()
                if item is _STOP:
                    return
        finally:
            self._persist_last_used()
            cold_rows.close_thread_connections()

    def _wait_for_engine(self, queued_at: float) -> None:
        """Until the engine stops computing prompts, ``_MAX_DEFER`` after the block was queued,
        or a flush/close/put(wait=True) asks for the writes now."""
        while not self._hurry:
            left = queued_at + _MAX_DEFER - time.monotonic()
            if left <= 0 or self._engine_idle.wait(min(left, 0.05)):
                return

    def _write(self, block: KVBlock) -> None:
        try:
            if block.key not in self._entries:
                self._write_block(block)
        finally:
            with self._lock:
                self._pending.discard(block.key)

    def _write_block(self, block: KVBlock) -> None:
        key_hex = block.key.hex()
        if block_key(block.parent, block.token_ids) != block.key:
            self._log_once("write", ValueError("key is not block_key(parent, tokens); not stored"))
            self._stats.write_errors += 1
            return
        try:
            size = self._write_file(block, key_hex)
        except Exception as err:  # noqa: BLE001 - disk full, read-only, directory removed, ...
            self._log_once("write", err)
            self._stats.write_errors += 1
            return
        now = time.time()
        entry = KVBlock(block.key, block.parent, tuple(block.token_ids), None,
                        sum(a.nbytes for layer in block.layers for a in layer))
        self._db_call("insert", cold_rows.insert, [cold_rows.Row.of(entry, self.fingerprint_hex, size, now)])
        with self._lock:
            self._index(entry, size, now)
        self._stats.writes += 1

    def _write_file(self, block: KVBlock, key_hex: str) -> int:
        shard = self.dir / key_hex[:2]
        if not shard.is_dir():
            durable.make_dirs(shard, stop=self.root_dir)
        kinds = parse_tags(self.kinds) if self.kinds else ((FULL, 0),) * len(block.layers)
        arrays = {}
        for names, layer in zip(block_file.tensor_names(kinds), block.layers):
            arrays.update(zip(names, layer))
        # The attention tensors' dtype (state arrays carry their own), else the first array's.
        first = next((layer[0] for (kind, _), layer in zip(kinds, block.layers) if kind != STATE),
                     block.layers[0][0])
        dtype = str(first.dtype).rsplit(".", 1)[-1]
        meta = block_file.metadata(self.fingerprint_hex, block.key, block.parent, block.token_ids,
                                   dtype, len(block.layers), self.kinds)
        tmp = shard / f"{key_hex}.{os.getpid()}-{next(self._tmp_names)}{block_file.TMP_SUFFIX}"
        return durable.write_atomically(shard / f"{key_hex}{block_file.SUFFIX}", tmp,
                                        lambda f: mx.save_safetensors(f, arrays, metadata=meta))

    def _drop_dead_rows(self) -> None:
        with self._lock:
            dead, self._dead_rows = self._dead_rows, []
        if dead:
            self._db_call("delete", cold_rows.delete, dead)

    def _persist_last_used(self) -> None:
        dirty, self._dirty = self._dirty, {}
        if dirty:
            self._db_call("touch", cold_rows.touch, {k.hex(): t for k, t in dirty.items()})

    def _db_call(self, what: str, fn, arg) -> None:
        if not self._db:
            return
        try:
            fn(arg)
        except Exception as err:  # noqa: BLE001 - rows are a mirror; start-up repairs them
            self._log_once(f"db-{what}", err)
            self._stats.db_errors += 1

    # -- start-up -----------------------------------------------------------------------------------

    def _prepare_dir(self) -> None:
        """Create the model's directory and prove it writable, or raise OSError."""
        durable.make_dirs(self.dir)
        probe = self.dir / f".probe-{os.getpid()}-{threading.get_ident()}"
        with open(probe, "wb") as f:
            f.write(b"omlx")
        os.remove(probe)

    def _write_model_info(self, info: dict) -> None:
        """Record which model folder these blocks belong to (``model.json``, for `omlx cache`:
        a fingerprint alone does not say). Best effort: the cache works without it."""
        final = self.dir / block_file.MODEL_INFO
        tmp = self.dir / f"{block_file.MODEL_INFO}.{os.getpid()}-{next(self._tmp_names)}{block_file.TMP_SUFFIX}"
        body = json.dumps(dict(info, fingerprint=self.fingerprint_hex), sort_keys=True).encode() + b"\n"
        try:
            durable.write_atomically(final, tmp, lambda f: f.write(body))
        except OSError as err:
            self._log_once("model-info", err)

    def _reconcile(self) -> None:
        """Index every block file: from its row when it has one (no file is opened), else from
        its header if valid (and give it a row), else remove it. Remove dead writers' temp files
        and foreign files; delete rows without a file."""
        started = time.perf_counter()
        rows: Dict[str, cold_rows.Row] = {}
        if self._db:
            try:
                rows = cold_rows.rows_for(self.fingerprint_hex)
            except Exception as err:  # noqa: BLE001
                self._log_once("db-read", err)
                self._stats.db_errors += 1
                self._db = False
        bad, new_rows, bad_rows = 0, [], []
        for shard in durable.scandir(self.dir):
            if not (SHARD_DIR.match(shard.name) and shard.is_dir(follow_symlinks=False)):
                continue
            for f in durable.scandir(shard.path):
                m = BLOCK_NAME.match(f.name)
                if m is None or f.name[:2] != shard.name:
                    t = TMP_NAME.match(f.name)
                    if t is None or not durable.pid_alive(int(t.group(2))):
                        bad += durable.remove(f.path, log=None if t else "foreign file")
                    continue
                key_hex = m.group(1)
                row = rows.pop(key_hex, None)
                if row is not None:
                    entry = row.block()
                    if entry is not None:
                        self._index(entry, row.bytes, row.last_used)
                        continue
                    bad_rows.append(key_hex)  # unusable (e.g. older than migration 0002): re-read
                try:
                    h = block_file.read_header(f.path, self.fingerprint_hex, key_hex, self.kinds)
                except (OSError, InvalidBlockFile) as err:
                    logger.warning("cold tier: removing bad block file %s: %s", f.path, err)
                    bad += durable.remove(f.path)
                    continue
                entry = KVBlock(h.key, h.parent, h.token_ids, None, h.tensor_bytes)
                new_rows.append(cold_rows.Row.of(entry, self.fingerprint_hex, h.file_bytes, h.mtime))
                self._index(entry, h.file_bytes, h.mtime)
        if self._db and (rows or bad_rows):
            self._db_call("delete", cold_rows.delete, list(rows) + bad_rows)
        if self._db and new_rows:
            self._db_call("insert", cold_rows.insert, new_rows)
        self._stats.reconcile_seconds = time.perf_counter() - started
        logger.info("cold tier %s: %d blocks, %d bytes; re-indexed %d files without rows, dropped %d "
                    "rows without files, removed %d bad files, in %.3f s", self.dir, self._stats.files,
                    self._stats.bytes, len(new_rows), len(rows), bad, self._stats.reconcile_seconds)

    # -- index bookkeeping (callers hold self._lock, or run before the writer starts) ---------------

    def _index(self, block: KVBlock, file_bytes: int, last_used: float) -> None:
        if block.key in self._entries:
            return
        self._entries[block.key] = _Entry(block, file_bytes, last_used)
        self._children.setdefault(block.parent, set()).add(block.key)
        self._stats.files += 1
        self._stats.bytes += file_bytes

    def _unindex(self, key: bytes) -> bool:
        e = self._entries.pop(key, None)
        if e is None:
            return False
        siblings = self._children.get(e.block.parent)
        if siblings is not None:
            siblings.discard(key)
            if not siblings:
                del self._children[e.block.parent]
        self._dirty.pop(key, None)
        self._stats.files -= 1
        self._stats.bytes -= e.file_bytes
        return True

    def _discard(self, key: bytes, remove_file: bool) -> None:
        """Forget a block that failed to load; its file goes first, then (on the writer) its row."""
        key_hex = key.hex()
        if remove_file:
            durable.remove(self.dir / key_hex[:2] / f"{key_hex}{block_file.SUFFIX}")
        with self._lock:
            self._unindex(key)
            self._dead_rows.append(key_hex)
        self._stats.read_errors += 1

    def _log_once(self, op: str, err: BaseException) -> None:
        kind = (op, type(err).__name__, getattr(err, "errno", None))
        if kind in self._logged:
            logger.debug("cold tier %s error: %s", op, err)
            return
        self._logged.add(kind)
        logger.warning("cold tier %s error (%s); the block is skipped, further errors of this kind "
                       "are logged at debug level: %s", op, self.dir, err)


def _load_layers(path: Path, header: BlockHeader) -> list:
    """The tensors of a file whose header was just checked, checked against that header."""
    arrays, meta = mx.load(str(path), return_metadata=True)
    n = len(header.token_ids)
    expected = (header.key.hex(), block_file.encode_tokens(header.token_ids))
    if (meta.get("key"), meta.get("tokens")) != expected:
        raise InvalidBlockFile("file changed while it was read")
    layers = []
    for i, ((kind, count), names) in enumerate(zip(header.kinds, block_file.tensor_names(header.kinds))):
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
