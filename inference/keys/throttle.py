"""Failed keys and failed console logins, counted per client address (in this process's memory).

An address with ``FAILURE_LIMIT`` failures in the last ``FAILURE_WINDOW_SECONDS`` gets a 429 with
Retry-After for every key or login it tries until the oldest of them leaves the window, the right
key included: a guess must not learn anything while the address is held back.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from typing import Deque, Optional

FAILURE_LIMIT = 10
FAILURE_WINDOW_SECONDS = 60.0
MAX_ADDRESSES = 10_000  # the oldest address is forgotten past this (memory stays bounded)


class FailureThrottle:
    """``address -> deque of failure times`` (monotonic, oldest first, at most ``limit``), in
    least-recently-failed order."""

    def __init__(self, limit: int = FAILURE_LIMIT, window: float = FAILURE_WINDOW_SECONDS):
        self.limit = limit
        self.window = window
        self._failures: "OrderedDict[str, Deque[float]]" = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, address: Optional[str]) -> int:
        """Seconds until ``address`` may try again; 0: now."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.get(address or "")
            if not times:
                return 0
            while times and times[0] <= now - self.window:
                times.popleft()
            if len(times) < self.limit:
                return 0
            return max(1, math.ceil(times[0] + self.window - now))

    def fail(self, address: Optional[str]) -> None:
        with self._lock:
            times = self._failures.pop(address or "", None) or deque(maxlen=self.limit)
            times.append(time.monotonic())
            self._failures[address or ""] = times
            while len(self._failures) > MAX_ADDRESSES:
                self._failures.popitem(last=False)


_throttle = FailureThrottle()


def get_throttle() -> FailureThrottle:
    return _throttle
