"""The engine of an embedding or reranker model: one thread that does all of its MLX work, and a
queue of jobs that it coalesces into batched forward passes.

The loop: wait for a job; take every job queued by then (and, with ``max_batch_wait_ms``, those
that arrive within that time after the first, until ``MAX_BATCH_ROWS`` sequences wait); pool the
sequences of all of them, sort them by length (less padding), cut them into batches of at most
``max_batch_tokens`` padded tokens and ``MAX_BATCH_ROWS`` sequences, run each batch once and
hand every job its own rows, in its own order. Jobs that arrive while a batch runs make
the next batch, so concurrent requests share forward passes without a fixed wait.

The model pool (``inference.pool``) manages it like a text engine: ``num_active``,
``idle_since``, ``stats``, ``call``, ``close`` and ``loaded.model``. Each forward pass is counted in /metrics
under the model's name (``omlx_embedding_forward_passes_total``, ``omlx_embedding_sequences_total``):
their ratio is the batch size requests actually got.
"""

from __future__ import annotations

import logging
import queue
import time
from concurrent.futures import Future
from typing import List, Optional, Sequence

import numpy as np

from inference import metrics
from inference.engine.engine_thread import EngineThread
from inference.engine.stats import EngineStats

from .encoder_model import EncoderModel, Seq, load_encoder

logger = logging.getLogger("omlx.embedding")

MAX_BATCH_TOKENS = 8192  # padded tokens in one forward pass (rows x longest row); >= MAX_TOKENS
MAX_BATCH_ROWS = 256


def _sequences(message: tuple) -> int:
    kind, value = message
    return len(value.seqs) if kind == "job" else 0


class _Job:
    def __init__(self, seqs: Sequence[Seq]):
        self.seqs = list(seqs)
        self.rows: List[Optional[np.ndarray]] = [None] * len(self.seqs)
        self.left = len(self.seqs)
        self.future: Future = Future()


class EncoderEngine(EngineThread):
    """Serves one embedding or reranker model (``kind``). ``submit`` may be called from any
    thread; the forward passes run on the engine's thread."""

    def __init__(
        self,
        model_path,
        kind: str = "embedding",
        max_batch_wait_ms: float = 0.0,
        dtype: Optional[str] = None,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
        name: Optional[str] = None,
        **_text_settings,
    ):
        self.kind = kind
        self.name = name or str(model_path)  # the /metrics label
        self.max_batch_wait = max(0.0, float(max_batch_wait_ms)) / 1000.0
        self.max_batch_tokens = max_batch_tokens
        self.prefix_cache = None  # no KV cache: the pool and /metrics skip it
        self.loaded: Optional[EncoderModel] = None
        self.batches = 0  # forward passes run (tests and benchmarks read it)
        self.rows = 0
        self._start("omlx-encoder", model_path, dtype)

    # -- any thread ----------------------------------------------------------------------------

    def submit(self, seqs: Sequence[Seq]) -> Future:
        """Queue token sequences; the future's result has one row per sequence, in order
        (embeddings [n, dim] or scores [n])."""
        self._check_open()
        job = _Job(seqs)
        if not job.seqs:
            raise ValueError("no sequences to run")
        self._count(1)
        job.future.add_done_callback(self._finished)
        self._inbox.put(("job", job))
        return job.future

    def stats(self, held_blocks: bool = False) -> EngineStats:
        """Jobs submitted and not finished; no KV cache, no running generations."""
        return EngineStats(active=self.num_active())

    def _finished(self, _future) -> None:
        self._count(-1)

    # -- the engine thread ---------------------------------------------------------------------

    def _main(self, model_path, dtype) -> None:
        try:
            self.loaded = load_encoder(model_path, self.kind, dtype)
        except BaseException as exc:  # reported to the constructor's caller
            self._loaded(exc)
            return
        self._loaded()
        while True:
            messages = [self._inbox.get()]
            deadline = time.monotonic() + self.max_batch_wait
            waiting = _sequences(messages[0])
            while True:  # everything queued now, then what arrives before the deadline
                try:
                    messages.append(self._inbox.get_nowait())
                    waiting += _sequences(messages[-1])
                    continue
                except queue.Empty:
                    pass
                left = deadline - time.monotonic()
                if left <= 0 or waiting >= MAX_BATCH_ROWS:  # a full batch gains nothing by waiting
                    break
                if any(kind != "job" for kind, _ in messages):  # a close or a call waits for no batch
                    break
                try:
                    messages.append(self._inbox.get(timeout=left))
                    waiting += _sequences(messages[-1])
                except queue.Empty:
                    break
            jobs = [value for kind, value in messages if kind == "job"]
            if jobs:
                self._run(jobs)
            for kind, value in messages:
                if kind == "call":
                    self._answer(value)
                elif kind == "close":
                    self._fail_queued()
                    return

    def _run(self, jobs: List[_Job]) -> None:
        # A job whose request went away (its future cancelled) is dropped; the others can no
        # longer be cancelled, so setting their results never races a cancel.
        jobs = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        rows = sorted(
            ((len(seq[0]), job, i) for job in jobs for i, seq in enumerate(job.seqs)), key=lambda r: r[0]
        )
        start = 0
        while start < len(rows):
            end = start + 1  # sorted by length: the last row of a batch is its longest
            while (
                end < len(rows)
                and end - start < MAX_BATCH_ROWS
                and rows[end][0] * (end + 1 - start) <= self.max_batch_tokens
            ):
                end += 1
            batch = rows[start:end]
            try:
                out = self.loaded.run([job.seqs[i] for _, job, i in batch])
            except Exception as exc:
                logger.exception("a batch of %d sequences failed", len(batch))
                for _, job, _ in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
                        job.left = -1
                start = end
                continue
            self.batches += 1
            self.rows += len(batch)
            metrics.encoder_batch(self.name, len(batch))
            for (_, job, i), row in zip(batch, out):
                job.rows[i] = row
                job.left -= 1
                if job.left == 0 and not job.future.done():
                    job.future.set_result(np.stack(job.rows))
            start = end

    def _fail_queued(self) -> None:
        while True:
            try:
                kind, value = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "job" and value.future.set_running_or_notify_cancel():
                value.future.set_exception(RuntimeError("the engine was closed"))
            elif kind == "call":
                value[1].put((False, RuntimeError("the engine was closed")))
