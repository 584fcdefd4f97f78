"""The Status page's last hour: a ``Point`` every 5 seconds, kept in memory (720 points).

A daemon thread (started on first use, ``get_history()``) reads ``inference.metrics.totals()``
(cumulative counters and current gauges of this process) and turns the difference with the
previous reading into rates over the interval: generated tokens per second, TTFT percentiles of
the requests whose first token came in the interval, hot and cold hit rates of the prompt tokens
looked up in it. Nothing survives a restart; the thread never keeps the process alive.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Deque, Dict, List, Optional

from inference import metrics

logger = logging.getLogger("omlx.admin")

INTERVAL_SECONDS = 5.0
KEEP_POINTS = 720  # one hour at 5 s


@dataclass(frozen=True)
class Point:
    """The figures of one interval, ending at ``at`` (time.time()). Rates are None when the
    interval had nothing to measure (no previous reading, no first token, no lookup)."""

    at: float
    loaded_models: int
    models: Dict[str, int]  # loaded model id -> memory counted for it (bytes)
    model_memory_used: Optional[int]
    model_memory_limit: Optional[int]
    process_memory: Optional[int]
    running: int  # requests prefilling or decoding in this process's engines
    waiting: int  # requests queued in them
    in_flight: int  # API choices this server admitted and has not finished (any worker)
    requests: int  # choices finished since start
    tokens_per_second: Optional[float]  # generated over the interval
    ttft_p50: Optional[float]  # seconds
    ttft_p95: Optional[float]
    hot_hit_rate: Optional[float]  # share of the prompt tokens looked up in the interval
    cold_hit_rate: Optional[float]
    tokens_saved: int  # prompt tokens served from the cache (hot + cold) since start

    def to_dict(self) -> dict:
        return asdict(self)


def make_point(now: metrics.Totals, before: Optional[metrics.Totals]) -> Point:
    """The point of the interval from ``before`` to ``now`` (rates None without ``before``)."""
    tps = ttft_p50 = ttft_p95 = hot_rate = cold_rate = None
    if before is not None and now.at > before.at:
        tps = max(0, now.generated_tokens - before.generated_tokens) / (now.at - before.at)
        ttfts = metrics.recent_ttfts(since=before.at)
        if ttfts:
            ttft_p50, ttft_p95 = percentile(ttfts, 50), percentile(ttfts, 95)
        looked = now.lookup_tokens - before.lookup_tokens
        if looked > 0:
            hot_rate = (now.hot_hit_tokens - before.hot_hit_tokens) / looked
            cold_rate = (now.cold_hit_tokens - before.cold_hit_tokens) / looked
    return Point(
        at=now.at,
        loaded_models=len(now.models),
        models={i: m["memory_bytes"] for i, m in sorted(now.models.items())},
        model_memory_used=now.model_memory_used,
        model_memory_limit=now.model_memory_limit,
        process_memory=now.process_memory,
        running=now.running,
        waiting=now.waiting,
        in_flight=now.api_in_flight,
        requests=now.generations,
        tokens_per_second=tps,
        ttft_p50=ttft_p50,
        ttft_p95=ttft_p95,
        hot_hit_rate=hot_rate,
        cold_hit_rate=cold_rate,
        tokens_saved=now.hot_hit_tokens + now.cold_hit_tokens,
    )


def percentile(values: List[float], p: float) -> float:
    """The ``p``-th percentile (linear interpolation between the closest ranks)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class History:
    """Points of the last ``keep`` intervals, oldest first. ``sample()`` takes one now (the
    thread calls it every ``interval`` seconds); ``pool`` defaults to the process's pool."""

    def __init__(self, interval: float = INTERVAL_SECONDS, keep: int = KEEP_POINTS, pool=None):
        self.interval = interval
        self.pool = pool
        self._points: Deque[Point] = deque(maxlen=keep)
        self._previous: Optional[metrics.Totals] = None
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def sample(self) -> Point:
        now = metrics.totals(self.pool)
        with self._lock:
            point = make_point(now, self._previous)
            self._previous = now
            self._points.append(point)
        return point

    def points(self) -> List[Point]:
        with self._lock:
            return list(self._points)

    def latest(self) -> Optional[Point]:
        with self._lock:
            return self._points[-1] if self._points else None

    def start(self) -> None:
        """Start sampling in a daemon thread (once; a first point at once)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="omlx-history", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a failed reading leaves a gap, never ends the series
                logger.exception("sampling the status history failed")
            if self._stop.wait(self.interval):
                return


_history: Optional[History] = None
_history_lock = threading.Lock()


def get_history() -> History:
    """The process's history, sampling from the first call on."""
    global _history
    with _history_lock:
        if _history is None:
            _history = History()
            atexit.register(_history.stop)  # before the interpreter tears down
        _history.start()
        return _history
