"""Which worker runs a request, in Redis mode (OMLX_ROUTE_POLICY; docs/operations.md).

``prefix`` (the default), in the manner of SGLang's cache-aware router and llm-d's prefix scorer:
each live worker's match is the longest prefix of the request's route keys
(inference/dispatch/route_keys.py) that it holds, by its published summary
(inference/dispatch/worker_summary.py) or because this server sent it those keys before (summaries
are published every few seconds; the server's own decisions are known at once). The worker with the
longest match wins, the least loaded among equals; but when its load exceeds the least loaded
worker's by more than OMLX_ROUTE_BALANCE_THRESHOLD requests, the least loaded worker takes it
instead (a hot prefix must not pile every request on one worker). Nobody holding anything: the
least loaded worker. ``least-loaded``: always the least loaded. ``random``: any live worker.
Among equal workers (match and load), the one this server sent fewest requests, so that new
conversations spread out; ties beyond that at random.

A worker's load: requests running or waiting in its engines by its summary, or the requests this
server sent it that have not ended, whichever is larger. Ties are broken at random.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from .worker_summary import WorkerSummary

POLICIES = ("prefix", "random", "least-loaded")
MEMORY_KEYS = 200_000  # route keys -> worker remembered by this server (LRU)


@dataclass
class Decision:
    """Where a request goes and why: ``reason`` is "prefix" (the longest match won), "balance" (the
    longest match's worker was too loaded), "least_loaded" (nobody held a prefix, or that policy),
    "random". ``matched``: how many of its route keys the chosen worker holds."""

    worker: str
    reason: str
    matched: int = 0


class Router:
    """The routing state of one server process: its recent decisions and in-flight counts."""

    def __init__(self, policy: str = "prefix", balance_threshold: int = 4, rng=None):
        if policy not in POLICIES:
            raise ValueError(f"route policy {policy!r}: must be one of {', '.join(POLICIES)}")
        self.policy = policy
        self.balance_threshold = balance_threshold
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._sent: "OrderedDict[str, str]" = OrderedDict()  # route key -> worker it was sent to
        self._in_flight: Dict[str, int] = {}
        self._count: Dict[str, int] = {}  # requests sent to each worker

    def choose(self, keys: Sequence[str], workers: Dict[str, Optional[WorkerSummary]]) -> Decision:
        """The worker for a request of route ``keys`` among the live ``workers`` (id -> its summary,
        None when it published none); ValueError when there is none."""
        if not workers:
            raise ValueError("no live worker")
        names = sorted(workers)
        with self._lock:
            loads = {w: self._load(w, workers[w]) for w in names}
            if self.policy == "random":
                return Decision(self._rng.choice(names), "random")
            lightest = min(loads.values())
            least = self._fewest_sent([w for w in names if loads[w] == lightest])
            if self.policy == "least-loaded":
                return Decision(least, "least_loaded")
            matched = {w: self._matched(keys, w, workers[w]) for w in names}
            longest = max(matched.values())
            if longest == 0:
                return Decision(least, "least_loaded")
            best = [w for w in names if matched[w] == longest]
            low = min(loads[w] for w in best)
            pick = self._fewest_sent([w for w in best if loads[w] == low])
            if loads[pick] - lightest > self.balance_threshold:
                return Decision(least, "balance", matched[least])
            return Decision(pick, "prefix", longest)

    def _fewest_sent(self, candidates: List[str]) -> str:
        """The candidate this server sent fewest requests (round robin among equals)."""
        fewest = min(self._count.get(w, 0) for w in candidates)
        return self._rng.choice([w for w in candidates if self._count.get(w, 0) == fewest])

    def _load(self, worker: str, summary: Optional[WorkerSummary]) -> int:
        published = summary.load if summary is not None else 0
        return max(published, self._in_flight.get(worker, 0))

    def _matched(self, keys: Sequence[str], worker: str, summary: Optional[WorkerSummary]) -> int:
        held = set(summary.keys) if summary is not None else ()
        count = 0
        for key in keys:
            if key not in held and self._sent.get(key) != worker:
                break
            count += 1
        return count

    def sent(self, worker: str, keys: List[str]) -> None:
        """A request of route ``keys`` went to ``worker``: it will hold them; one more in flight."""
        with self._lock:
            for key in keys:
                self._sent[key] = worker
                self._sent.move_to_end(key)
            while len(self._sent) > MEMORY_KEYS:
                self._sent.popitem(last=False)
            self._in_flight[worker] = self._in_flight.get(worker, 0) + 1
            self._count[worker] = self._count.get(worker, 0) + 1

    def ended(self, worker: str) -> None:
        """A request sent to ``worker`` ended (for its view, whatever the outcome)."""
        with self._lock:
            left = self._in_flight.get(worker, 0) - 1
            if left > 0:
                self._in_flight[worker] = left
            else:
                self._in_flight.pop(worker, None)


class WorkerView:
    """The live workers and their summaries, read from Redis at most every ``max_age`` seconds: the
    workers that have both a presence key and a valid summary."""

    def __init__(self, max_age: float = 0.25):
        self.max_age = max_age
        self._at = 0.0
        self._workers: Dict[str, Optional[WorkerSummary]] = {}
        self.refused = 0  # summaries refused at the last read
        self._lock = threading.Lock()

    def read(self, client, secret: str) -> Dict[str, Optional[WorkerSummary]]:
        from . import worker_presence, worker_summary

        with self._lock:
            now = time.monotonic()
            if now - self._at < self.max_age:
                return self._workers
            alive = worker_presence.live_workers(client)
            summaries, self.refused = worker_summary.read_all(client, secret)
            if self.refused:
                from inference.metrics.definitions import ROUTE_SUMMARIES_REFUSED

                ROUTE_SUMMARIES_REFUSED.inc(self.refused)
            # A worker is routed to only with a presence key and a summary signed with the secret:
            # a presence key alone (plain, anyone with access to Redis can write one) is not trusted.
            self._workers = {w: summaries[w] for w in alive if w in summaries}
            self._at = now
            return self._workers
