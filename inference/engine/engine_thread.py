"""What every engine shares (the text engine, inference.engine.engine, and the embedding and
reranker engine, inference.embedding.engine): one thread that loads the model and does all of
its MLX work, an inbox of messages for it, and the count of requests in flight that the model
pool reads (``num_active``, ``idle_since``) before it unloads anything.

The inbox carries (kind, item) tuples. Every engine's loop handles ``("call", (fn, done))`` with
``answer`` (run ``fn(engine)`` on the engine's thread, then ``done(ok, result or exception)``)
and ends at ``("close", None)``; the other kinds are each engine's own.

An engine closes itself when the interpreter exits and when it is collected (``weakref.finalize``
over its inbox and thread, never the engine): a script that forgets ``close()`` must not end with
the engine's thread still inside MLX while the interpreter tears down (the process aborts).
Its thread holds the engine while it runs, so collection closes only an engine whose loading
failed; the fronts that scripts hold (``LLM``) close theirs when collected."""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from typing import Callable, Optional


def _wait_for_os_thread_exit(native_id: Optional[int], timeout: float = 5.0) -> None:
    """Wait until the engine's OS thread is really gone, not just its Python side.

    After join() returns, the thread still runs its C++ thread-local destructors, and MLX's
    compile cache among them takes the GIL; if the interpreter is finalizing by then, CPython
    kills the thread inside a noexcept destructor and the whole process aborts. Linux shows
    threads in /proc; elsewhere there is nothing to poll and this returns at once.
    """
    task = f"/proc/self/task/{native_id}"
    deadline = time.monotonic() + timeout
    while native_id and os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.001)


def _shut_down(inbox: "queue.SimpleQueue[tuple]", thread: threading.Thread) -> None:
    """Ask the engine's loop to end and wait until its OS thread is gone (close, exit, collection)."""
    if thread.is_alive():
        inbox.put(("close", None))
        thread.join()
        _wait_for_os_thread_exit(thread.native_id)


class EngineThread:
    """Base of the engines. A subclass sets up its own state, then calls ``_start(name, *args)``,
    which runs ``self._main(*args)`` on a new thread and returns once ``_main`` has called
    ``_loaded()`` (or raises what ``_main`` stored in ``_load_error`` before that)."""

    def _start(self, name: str, *args) -> None:
        self._inbox: "queue.SimpleQueue[tuple]" = queue.SimpleQueue()
        self._active = 0  # requests submitted and not yet finished (any thread reads it)
        self._active_lock = threading.Lock()
        self._last_activity = time.monotonic()  # last submit or finish
        self._ready = threading.Event()
        self._load_error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._main, args=args, name=name, daemon=True)
        # Runs at close(), at exit (before the interpreter tears down) or when collected.
        self._closer = weakref.finalize(self, _shut_down, self._inbox, self._thread)
        self._thread.start()
        self._ready.wait()
        if self._load_error is not None:
            raise self._load_error

    def _main(self, *args) -> None:
        raise NotImplementedError

    def _loaded(self, error: Optional[BaseException] = None) -> None:
        """Called by ``_main`` when loading ended: ``error`` is raised to the constructor's caller."""
        self._load_error = error
        self._ready.set()

    def _check_open(self) -> None:
        if not self._thread.is_alive():
            raise RuntimeError("the engine is closed")

    def _count(self, n: int) -> None:
        """``n`` requests started (> 0) or finished (< 0)."""
        with self._active_lock:
            self._active += n
            self._last_activity = time.monotonic()

    def num_active(self) -> int:
        """Requests submitted and not finished yet (queued, waiting or running): the model pool
        never unloads an engine while this is above zero."""
        with self._active_lock:
            return self._active

    def idle_since(self) -> Optional[float]:
        """``time.monotonic()`` of the last submit or finish when no request is active, else None."""
        with self._active_lock:
            return None if self._active else self._last_activity

    def call(self, fn: Callable[["EngineThread"], object], timeout: Optional[float] = None):
        """Run ``fn(engine)`` on the engine thread between two steps and return its result
        (for work on engine-owned state: flushing the cache tiers, reading statistics)."""
        self._check_open()
        done: "queue.SimpleQueue[tuple]" = queue.SimpleQueue()
        self._inbox.put(("call", (fn, lambda ok, value: done.put((ok, value)))))
        ok, value = done.get(timeout=timeout)
        if not ok:
            raise value
        return value

    def _answer(self, item: tuple) -> None:
        """Handle a ``("call", item)`` message on the engine thread."""
        fn, done = item
        try:
            result = (True, fn(self))
        except Exception as exc:
            result = (False, exc)
        done(*result)

    def close(self) -> None:
        """End the engine's thread (requests in flight fail). Idempotent."""
        self._closer()
