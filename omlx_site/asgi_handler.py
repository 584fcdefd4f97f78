"""Django's ASGI handler with the request threads kept for later requests.

Django runs each HTTP request in an asgiref ``ThreadSensitiveContext``: the request's synchronous
code (sync views, the ``request_started`` / ``request_finished`` signal receivers, session saves)
all runs on one thread of its own. Without an executor of ours, asgiref starts a new thread for
every request and another one to join it at the end; on the API path that was most of the event
loop's time per request (py-spy, docs/benchmarks.md). Here each request borrows a one-thread
executor from a free list instead, and gives it back once its thread is idle: still one thread
per request at a time, as in a threaded WSGI server (Django closes the thread's database
connections at the end of the request, as before).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import List

from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler

# Idle request threads kept; more are started while more requests run at once, and shut down after.
KEEP_IDLE_THREADS = 16


class _Executors:
    def __init__(self, keep: int):
        self.keep = keep
        self._free: List[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._free:
                return self._free.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="omlx-request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Back in the free list once the thread has finished what the request left it (a sync
        call whose awaiting request was cancelled may still run)."""
        try:
            executor.submit(_nothing).add_done_callback(lambda _: self._idle(executor))
        except RuntimeError:  # shut down (the interpreter is stopping)
            pass

    def _idle(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(executor)
                return
        executor.shutdown(wait=False)


def _nothing() -> None:
    pass


class PooledThreadASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose requests run their sync code on reused threads (see the module)."""

    def __init__(self, keep_idle_threads: int = KEEP_IDLE_THREADS):
        super().__init__()
        self._executors = _Executors(keep_idle_threads)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._executors.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._executors.give_back(executor)
