"""Clients coming back. An agent sends its next turn as soon as its answer is whole (a closed
loop): the end of an answer announces an arrival a few milliseconds later, during the step that
follows it. In a closed agent loop on the CPU, verify passes in those steps were most of what
prompt lookup added to the time to first token (issue 27; docs/benchmarks.md, "Clients coming
back").

``Returns`` keeps the answers that ended whose clients have not come back (``pending``) and how
often a client came back within ``WINDOW`` seconds (``rate``, a moving average over ends: each
request taken in, by the time it was submitted, takes the oldest end before it as returned; an
end whose window closed with none counts as not returned). ``expected`` is the pending ends
whose window is open times that rate: while it is one half or more, the speculation policy
decodes plainly where a verify pass costs more than a plain step (``SpeculationPolicy.coming``,
``_awaits_return``). Clients that do not come back at once (a person reading the answer, an
open-loop benchmark) bring the rate down, and with it the holds; where a verify pass costs about
a plain step (a GPU) the pass runs anyway.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Deque


class Returns:
    # Seconds after an answer's end during which an arrival counts as its client's return (and
    # the policy expects it): a client on the same machine came back 6 to 21 ms after the end
    # (p10 to p90, bench_agentic.py's closed loop over HTTP).
    WINDOW = 0.05
    ALPHA = 0.2  # weight of the newest end in ``rate``

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock  # the clock of ``Request.created``
        self._ends: Deque[float] = deque()  # when each answer ended, no return matched to it yet
        self.rate = 0.0  # share of ends that a return followed within the window (no evidence: 0)
        self.returned = 0  # ends a return followed (totals, for tests and benchmarks)
        self.lapsed = 0  # ends whose window closed without one

    @property
    def pending(self) -> int:
        """Ends no return has been matched to yet (their windows open, or not yet found closed)."""
        return len(self._ends)

    def ended(self, answers: int = 1) -> None:
        """``answers`` answers were delivered whole (finish reason stop or length)."""
        self._ends.extend([self.clock()] * answers)

    def arrived(self, at: float) -> None:
        """A request submitted at ``at`` (its ``created``: the engine takes requests in between
        steps, a long step after they came) was taken in: the ends whose window closed before it
        lapsed, and the oldest end left before it, if any, is taken as returned."""
        self._lapse(at)
        if self._ends and self._ends[0] <= at:
            self._ends.popleft()
            self.returned += 1
            self.rate += self.ALPHA * (1.0 - self.rate)

    def expected(self, unmatched: int = 0) -> float:
        """Returns expected now: the pending ends whose window is open, times ``rate``.
        ``unmatched``: requests submitted that the engine has not taken in; until it does, an
        end they may be the return of is not taken as lapsed (nor left out: such a return waits
        for the step as much as one still on its way)."""
        now = self.clock()
        if not unmatched:
            self._lapse(now)
        return self.rate * sum(1 for end in self._ends if now - end <= self.WINDOW)

    def _lapse(self, now: float) -> None:
        while self._ends and now - self._ends[0] > self.WINDOW:
            self._ends.popleft()
            self.lapsed += 1
            self.rate -= self.ALPHA * self.rate
