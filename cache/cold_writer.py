"""The cold tier's writer thread: queued blocks become files, then rows, off the engine's thread.

A bounded queue of blocks; ``put`` never blocks the engine (a full queue drops the block) unless
the caller asks to wait (a model being unloaded). While the engine computes prompts the writer
starts no block queued less than ``_MAX_DEFER`` ago (``defer``), and a flush, a close or a waiting
put lifts that (``_hurrying``). A write is crash-safe: temp file -> fsync -> rename -> fsync the
directory (cache/durable.py), then the row, so a file exists complete or not at all and a row
never names a file that is not. The thread also deletes the rows of files that loads found bad and
persists last-used times every ``_PERSIST_EVERY`` seconds and on flush and close.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import List, Optional

import mlx.core as mx

from . import block_file, cold_kids, durable
from .block_key import block_key
from .block_pool import KVBlock
from .cold_index import Row
from .layout import STATE

_PERSIST_EVERY = 30.0  # seconds between batched last-used updates of the rows
_STOP, _SYNC = object(), object()
# The longest a queued block waits for the engine to stop computing prompts before it is written
# anyway (a long prefill must not fill the queue until blocks are dropped).
_MAX_DEFER = 1.0


class ColdWriter:
    """The writer of one ColdTier (``tier``: its directory, entries, stats, index and logging)."""

    def __init__(self, tier, max_queue: int):
        self.tier = tier
        self._queue: "queue.Queue" = queue.Queue(max(1, max_queue))
        self._pending: set = set()  # keys queued, not yet written
        self._dead_rows: List[str] = []  # rows whose files load() removed
        self._engine_idle = threading.Event()  # cleared while the engine computes prompts
        self._engine_idle.set()
        self._hurry_lock = threading.Lock()
        self._hurry = 0  # flush/close/put(wait=True) in progress: write without waiting
        self._thread: Optional[threading.Thread] = None

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"omlx-cold-{self.tier.fingerprint_hex[:8]}"
        )
        self._thread.start()

    def put(self, block: KVBlock, wait: bool) -> None:
        """See ColdTier.put. The arrays are made contiguous and evaluated here, on the caller's
        (the engine's) thread, so the writer thread never computes with MLX."""
        entries = self.tier.entries
        with entries.lock:
            if block.key in entries or block.key in self._pending:
                return
            self._pending.add(block.key)
        layers = [tuple(mx.contiguous(a) for a in layer) for layer in block.layers]
        if self.tier.quantizer is not None:  # a float model's blocks, quantized on disk
            layers = self.tier.quantizer.encode(layers, self.tier.layer_kinds(len(layers)))
        mx.eval(layers)
        try:
            item = (
                KVBlock(block.key, block.parent, tuple(block.token_ids), layers, block.nbytes),
                time.monotonic(),
            )
            if wait:
                with self._hurrying():
                    self._queue.put(item)
            else:
                self._queue.put(item, block=False)
        except queue.Full:
            with entries.lock:
                self._pending.discard(block.key)
            self.tier.stats.dropped += 1

    def defer(self, busy: bool) -> None:
        with self._hurry_lock:
            if busy and not self._hurry:
                self._engine_idle.clear()
            else:
                self._engine_idle.set()

    def drop_row(self, key_hex: str) -> None:
        """A file the tier removed: its row goes on the writer (callers hold entries.lock)."""
        self._dead_rows.append(key_hex)

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
        if self._thread is not None and self._thread.is_alive():
            with self._hurrying():
                self._queue.put(_SYNC)
                self._queue.join()

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            with self._hurry_lock:
                self._hurry += 1  # for good
            self._engine_idle.set()
            self._queue.put(_STOP)
            self._thread.join()
        self._thread = None

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
                    self.tier.log_once("writer", err)
                finally:
                    if item is not None:
                        self._queue.task_done()
                if item is _STOP:
                    return
        finally:
            self._persist_last_used()
            if self.tier.index is not None:
                self.tier.index.close_thread()

    def _wait_for_engine(self, queued_at: float) -> None:
        """Until the engine stops computing prompts, ``_MAX_DEFER`` after the block was queued,
        or a flush/close/put(wait=True) asks for the writes now."""
        while not self._hurry:
            left = queued_at + _MAX_DEFER - time.monotonic()
            if left <= 0 or self._engine_idle.wait(min(left, 0.05)):
                return

    def _write(self, block: KVBlock) -> None:
        try:
            if block.key not in self.tier.entries:
                self._write_block(block)
        finally:
            with self.tier.entries.lock:
                self._pending.discard(block.key)

    def _write_block(self, block: KVBlock) -> None:
        tier = self.tier
        key_hex = block.key.hex()
        if block_key(block.parent, block.token_ids) != block.key:
            tier.log_once("write", ValueError("key is not block_key(parent, tokens); not stored"))
            tier.stats.write_errors += 1
            return
        try:
            size = self._write_file(block, key_hex)
        except Exception as err:  # noqa: BLE001 - disk full, read-only, directory removed, ...
            tier.log_once("write", err)
            tier.stats.write_errors += 1
            return
        try:  # after the file: other processes find the block through its parent (cold_kids.py)
            cold_kids.link(tier.dir, block.parent, block.key)
        except OSError as err:  # only a hint lost: they miss it until their next start
            tier.log_once("marker", err)
        now = time.time()
        entry = KVBlock(
            block.key,
            block.parent,
            tuple(block.token_ids),
            None,
            sum(a.nbytes for layer in block.layers for a in layer),
        )
        tier.db_call("insert", [Row.of(entry, tier.fingerprint_hex, size, now)])
        with tier.entries.lock:
            tier.entries.add(entry, size, now)
        tier.stats.writes += 1

    def _write_file(self, block: KVBlock, key_hex: str) -> int:
        tier = self.tier
        shard = tier.dir / key_hex[:2]
        if not shard.is_dir():
            durable.make_dirs(shard, stop=tier.root_dir)
        kinds = tier.layer_kinds(len(block.layers))
        arrays = {}
        for names, layer in zip(block_file.tensor_names(kinds, tier.kv), block.layers):
            arrays.update(zip(names, layer))
        # The attention tensors' dtype (state arrays carry their own; quantized KV: its scales'),
        # else the first array's.
        first = next(
            (
                a
                for (kind, _), layer in zip(kinds, block.layers)
                if kind != STATE
                for a in layer
                if a.dtype != mx.uint32
            ),
            block.layers[0][0],
        )
        dtype = str(first.dtype).rsplit(".", 1)[-1]
        meta = block_file.metadata(
            tier.fingerprint_hex,
            block.key,
            block.parent,
            block.token_ids,
            dtype,
            len(block.layers),
            tier.kinds,
            tier.kv,
        )
        tmp = shard / block_file.tmp_name(key_hex, next(tier.tmp_names))
        return durable.write_atomically(
            shard / f"{key_hex}{block_file.SUFFIX}",
            tmp,
            lambda f: mx.save_safetensors(f, arrays, metadata=meta),
        )

    def _drop_dead_rows(self) -> None:
        with self.tier.entries.lock:
            dead, self._dead_rows = self._dead_rows, []
        if dead:
            self.tier.db_call("delete", dead)

    def _persist_last_used(self) -> None:
        dirty = self.tier.entries.take_dirty()
        if dirty:
            self.tier.db_call("touch", {k.hex(): t for k, t in dirty.items()})
