"""Answers that have just ended, whose clients are likely to send their next turns at once: an
agent acts on a whole answer and sends its next turn as soon as it has it (a closed loop), so an
answer that ends is an arrival that is about to come (issue 24).

The scheduler holds a newcomer's prompt for a moment while such an arrival is due, so that the
two prompts are computed in one step instead of the second waiting for the first's whole step
(``Scheduler._follow_up_hold``). An expected arrival is forgotten when a request submitted after
that answer ended arrives (the oldest first: a request sent before it cannot be its next turn)
or when ``window`` seconds have passed since it ended, so a newcomer is held at most that long
for each answer that ends meanwhile, and never when nothing has just ended.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Optional


class FollowUps:
    def __init__(self):
        # (when, stamp) of each answer not yet followed by an arrival: ``when`` on the
        # scheduler's clock, ``stamp`` on ``time.perf_counter`` (``Request.created``'s clock)
        self._ended: deque = deque()
        self.holds = 0  # times a newcomer was held for an arrival (stats, tests)

    def answer_ended(self, now: float) -> None:
        self._ended.append((now, time.perf_counter()))

    def arrived(self, created: float) -> None:
        """A new request, submitted at ``created`` (``time.perf_counter``), arrived: the arrival
        expected first is here, if the request was submitted after that answer ended."""
        if self._ended and self._ended[0][1] <= created:
            self._ended.popleft()

    def expected(self, now: float, window: float) -> int:
        """Arrivals still expected: answers that ended less than ``window`` seconds ago."""
        while self._ended and now - self._ended[0][0] >= window:
            self._ended.popleft()
        return len(self._ended)

    def due(self, now: float, window: float) -> Optional[float]:
        """Seconds until the last expected arrival is given up; None when none is expected."""
        if not self.expected(now, window):
            return None
        return max(0.0, self._ended[-1][0] + window - now)
