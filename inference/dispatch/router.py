"""Which worker runs a request, in Redis mode (OMLX_ROUTE_POLICY; docs/operations.md).

``prefix`` (the default), in the manner of SGLang's cache-aware router and llm-d's prefix and
load scorers, weighs what a worker saves against what waits there, both in prompt tokens:

    cost(worker) = queued(worker) - shared(worker) + 2 x (prompt_tokens - held(worker))

The prompt tokens a worker does not hold count twice (``RECOMPUTE_WEIGHT``): this request waits
for their prefill there, and that worker's compute is spent on them, which its later requests
wait for in turn (a prefix computed again is work the cluster does twice). A request joins the
worker holding its prefix until the queue there outweighs twice the saving; a burst of new
conversations sharing a system prompt in flight at one worker joins it instead of each idle
worker computing it (on the agentic load, with the queue alone as the cost, the fourth request
of the first burst went to another worker and computed it again; docs/benchmarks.md).
``held``: the estimated prompt tokens of the longest prefix of the request's route keys
(inference/dispatch/route_keys.py) that the worker holds, by its published summary
(inference/dispatch/worker_summary.py) or because this server sent it those keys before
(summaries are published every few seconds; the server's own decisions are known at once).
Workers that publish the same ``cold_tier`` share one SSD tier (``--paged-ssd-cache-dir`` on a
shared folder): a prefix of a request that ended at any of them at least ``SHARED_TIER_DELAY``
ago is on that SSD (its blocks are queued for writing as they are computed, before the request
ends, and written within a second: cache/cold_writer.py) and every one of them can restore
it, so where that prefix is longer than what a worker holds itself, the tokens beyond count as
held, times ``SHARED_TIER_WEIGHT`` (1: as held; a worker restores a block only when reading it
beats recomputing it, and on the disks omlx is made for a restore costs a small fraction of a
prefill). A worker that never saw a shared system prompt is then as good a home for a new
conversation as one holding it in RAM, and new conversations spread out (fewest sent) instead of
piling on the workers that computed it first (0.5 measured 83.5 % reuse with 17/15/9 requests,
1.0 85.5 % with 16/14/11; docs/benchmarks.md).
``queued``: the work of the requests this server sent it that have not ended, each counted as
its prompt tokens not held there when it was sent, plus per token it may generate what a row of a
decode step costs there in prompt tokens, as the worker measured it (``decode_row_tokens`` in its
summary: a row computes one token, about what a prompt token costs; 1.2 on the tiny test model),
or OMLX_ROUTE_DECODE_WEIGHT before it has measured it. The rows decode in one batch: a newcomer's
steps carry them (each row makes every step a little longer), it does not wait for them to end.
A worker that reports more requests in its engines than that, and has taken jobs this server did
not send (another server's), has each extra one counted as the request being routed would cost
with nothing held. ``shared``: of that work, the prefill of prompt tokens this request
shares with a request in flight there: the worker computes a prefix once for every request that
shares it (``share_inflight_prefixes``), so that prefill serves this request too; a burst of new
conversations with one system prompt goes to one worker, instead of each worker computing it.
The cheapest worker wins: the one holding the prefix unless its queue exceeds another's by more
than twice the tokens it saves. Among equal costs the one holding most in its own cache (a hit in
RAM beats a restore from a shared SSD tier: a conversation's next turn stays home), then the
least queued, then the one this server sent
fewest requests (new conversations spread out), then at random. Nobody holding anything: the
least queued. ``least-loaded``: always the least queued. ``random``: any live worker.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

from .route_keys import Route
from .worker_summary import WorkerSummary

logger = logging.getLogger("omlx.dispatch")

POLICIES = ("prefix", "random", "least-loaded")
MEMORY_KEYS = 200_000  # route keys -> worker remembered by this server (LRU)
SHARED_TIER_WEIGHT = 1.0  # a prefix token on a shared SSD tier, against one in the worker's own cache
RECOMPUTE_WEIGHT = 2  # a prompt token computed: waited for by this request, then by the worker's next
SHARED_TIER_DELAY = 1.0  # seconds after a request ends until its blocks are on the SSD tier


@dataclass
class Decision:
    """Where a request goes and why: ``reason`` is "prefix" (the chosen worker holds the longest
    prefix anyone holds), "balance" (a worker holding a longer prefix was passed over: its queue
    outweighed the saving), "least_loaded" (nobody held a prefix, or that policy), "random".
    ``matched``: how many route keys the chosen worker holds (in its cache, or on an SSD tier it
    shares); ``held``: their estimated prompt tokens (those on a shared tier weighed);
    ``work``: the work this request adds to that worker's queue."""

    worker: str
    reason: str
    matched: int = 0
    held: int = 0
    work: int = 0
    queued: Optional[Dict[str, int]] = None  # the work waiting at each worker, as weighed
    flight: Optional["_Flight"] = None  # set by Router.sent


@dataclass
class _Flight:
    """A request in flight at a worker: its route and the prompt tokens held there when sent."""

    route: Route
    held: int


class Router:
    """The routing state of one server process: where it sent route keys (LRU), and per worker the
    requests it sent that have not ended and their work (``sent`` adds, ``ended`` removes)."""

    def __init__(self, policy: str = "prefix", decode_weight: float = 1.0, rng=None, clock=time.monotonic):
        if policy not in POLICIES:
            raise ValueError(f"route policy {policy!r}: must be one of {', '.join(POLICIES)}")
        if decode_weight < 0:
            raise ValueError("decode weight must be at least 0")
        self.policy = policy
        self.decode_weight = decode_weight
        self._rng = rng or random.Random()
        self._lock = threading.RLock()
        self._sent: "OrderedDict[str, Set[str]]" = OrderedDict()  # route key -> workers sent it
        self._in_flight: Dict[str, int] = {}  # worker -> requests sent, not ended
        self._count: Dict[str, int] = {}  # requests sent to each worker
        self._flights: Dict[str, List[_Flight]] = {}  # worker -> its requests in flight
        self._row_tokens: Dict[str, float] = {}  # worker -> its measured cost of a decode row
        self._clock = clock
        # route key -> {worker: when a request with it first ended there}
        self._ended: "OrderedDict[str, Dict[str, float]]" = OrderedDict()

    def choose(self, route: Route, workers: Dict[str, Optional[WorkerSummary]]) -> Decision:
        """The worker for a request of ``route`` among the live ``workers`` (id -> its summary,
        None when it published none); ValueError when there is none."""
        if not workers:
            raise ValueError("no live worker")
        names = sorted(workers)
        with self._lock:
            if self.policy == "random":
                pick = self._rng.choice(names)
                return Decision(pick, "random", work=self._work_of(route, 0))
            queued = {w: self._queued(w, workers[w], route) for w in names}
            if self.policy == "least-loaded":
                matched = dict.fromkeys(names, 0)
                held = own = dict.fromkeys(names, 0)
            else:
                matched = {w: self._matched(route.keys, w, workers[w]) for w in names}
                own = {w: route.held_tokens(matched[w]) for w in names}  # in its own cache
                reach = {w: self._held(route, w, matched[w], workers) for w in names}
                matched = {w: reach[w][0] for w in names}
                held = {w: reach[w][1] for w in names}
                queued = {w: max(0, queued[w] - self._shared(route, w)) for w in names}
            # What is not held is computed there: once for this request's wait, and once more as
            # work taken from the cluster (that worker's later requests wait for it too).
            cost = {w: queued[w] + RECOMPUTE_WEIGHT * (route.prompt_tokens - held[w]) for w in names}
            logger.debug("route costs %s (held %s)", cost, held)
            cheapest = min(cost.values())
            best = [w for w in names if cost[w] == cheapest]
            hottest = max(own[w] for w in best)  # a hit in RAM beats a restore from a shared SSD
            best = [w for w in best if own[w] == hottest]
            lightest = min(queued[w] for w in best)
            pick = self._fewest_sent([w for w in best if queued[w] == lightest])
            longest = max(matched.values())
            if longest == 0:
                reason = "least_loaded"
            else:
                reason = "prefix" if matched[pick] == longest else "balance"
            work = self._work_of(route, held[pick], self._row_tokens.get(pick))
            return Decision(pick, reason, matched[pick], held[pick], work, queued)

    def assign(self, route: Route, workers: Dict[str, Optional[WorkerSummary]]) -> Decision:
        """``choose`` and ``sent`` at once: requests routed at the same instant (a burst of new
        conversations) each see the ones before them, instead of all choosing from the same state
        (every idle worker then computed the burst's shared system prompt)."""
        with self._lock:
            decision = self.choose(route, workers)
            self.sent(decision, route)
            return decision

    def _work_of(self, route: Route, held: int, row_tokens: Optional[float] = None) -> int:
        weight = self.decode_weight if row_tokens is None else row_tokens
        return route.prompt_tokens - held + round(weight * route.decode_tokens)

    def _fewest_sent(self, candidates: List[str]) -> str:
        """The candidate this server sent fewest requests (round robin among equals)."""
        fewest = min(self._count.get(w, 0) for w in candidates)
        return self._rng.choice([w for w in candidates if self._count.get(w, 0) == fewest])

    def _queued(self, worker: str, summary: Optional[WorkerSummary], route: Route) -> int:
        """The work waiting at ``worker``: what this server sent it, plus the requests it reports
        beyond those, each as this one with nothing held. Those count only up to the jobs it took
        that this server did not send: a summary lags (published as a job is taken, then every
        third of a heartbeat), and this server's own ended requests must not count again."""
        others = 0
        if summary is not None:
            if summary.decode_row_tokens > 0:
                self._row_tokens[worker] = summary.decode_row_tokens
            foreign = summary.jobs_taken - self._count.get(worker, 0)
            others = max(0, min(foreign, summary.load - self._in_flight.get(worker, 0)))
        work = self._work_at(worker)
        return work + others * self._work_of(route, 0, self._row_tokens.get(worker))

    def _work_at(self, worker: str) -> int:
        """The work of the requests this server sent ``worker`` that have not ended: each one's
        prompt tokens not held there when sent, plus its tokens to generate x what a row of a
        decode step costs there (the worker's measured ``decode_row_tokens``, else
        OMLX_ROUTE_DECODE_WEIGHT). Rows decode in one batch: a newcomer's every step carries
        theirs, not waits for them."""
        row = self._row_tokens.get(worker)
        return sum(self._work_of(f.route, f.held, row) for f in self._flights.get(worker, ()))

    def _held(self, route: Route, worker: str, matched: int, workers) -> Tuple[int, int]:
        """The keys ``worker`` can serve from a cache and the prompt tokens it saves: the
        ``matched`` keys it holds, and beyond them, times SHARED_TIER_WEIGHT, those of a request
        that ended at a worker sharing its SSD tier."""
        own = route.held_tokens(matched)
        summary = workers[worker]
        tier = summary.cold_tier if summary is not None else ""
        if not tier:
            return matched, own
        peers = {w for w, s in workers.items() if s is not None and s.cold_tier == tier}
        written = self._clock() - SHARED_TIER_DELAY
        shared = 0
        for key in route.keys:
            ended = self._ended.get(key, {})
            if not any(ended.get(w, written + 1) <= written for w in peers):
                break
            shared += 1
        if shared <= matched:
            return matched, own
        return shared, own + round(SHARED_TIER_WEIGHT * (route.held_tokens(shared) - own))

    def _shared(self, route: Route, worker: str) -> int:
        """The prefill queued at ``worker`` that serves ``route`` too: per request in flight
        there, the prompt tokens of the keys both share beyond what it held when sent."""
        total = 0
        for flight in self._flights.get(worker, ()):
            common = 0
            for mine, theirs in zip(route.keys, flight.route.keys):
                if mine != theirs:
                    break
                common += 1
            total += max(0, min(flight.route.held_tokens(common), route.held_tokens(common)) - flight.held)
        return total

    def _matched(self, keys: List[str], worker: str, summary: Optional[WorkerSummary]) -> int:
        held = set(summary.keys) if summary is not None else ()
        count = 0
        for key in keys:
            if key not in held and worker not in self._sent.get(key, ()):
                break
            count += 1
        return count

    def sent(self, decision: Decision, route: Route) -> None:
        """The request of ``route`` went to ``decision.worker``: it will hold its keys; its work
        is queued there until ``ended``."""
        worker = decision.worker
        with self._lock:
            for key in route.keys:
                self._sent.setdefault(key, set()).add(worker)
                self._sent.move_to_end(key)
            while len(self._sent) > MEMORY_KEYS:
                self._sent.popitem(last=False)
            self._in_flight[worker] = self._in_flight.get(worker, 0) + 1
            self._count[worker] = self._count.get(worker, 0) + 1
            decision.flight = _Flight(route, decision.held)
            self._flights.setdefault(worker, []).append(decision.flight)

    def ended(self, decision: Decision) -> None:
        """A request sent to ``decision.worker`` ended (for its view, whatever the outcome)."""
        worker = decision.worker
        with self._lock:
            flights = self._flights.get(worker, [])
            if decision.flight in flights:
                flights.remove(decision.flight)
                # Its prompt's blocks are stored: on the worker's SSD tier within about a second.
                for key in decision.flight.route.keys:
                    # The first end counts: the blocks were written then; later ends rewrite none.
                    self._ended.setdefault(key, {}).setdefault(worker, self._clock())
                    self._ended.move_to_end(key)
                while len(self._ended) > MEMORY_KEYS:
                    self._ended.popitem(last=False)
            if not flights:
                self._flights.pop(worker, None)
            left = self._in_flight.get(worker, 0) - 1
            if left > 0:
                self._in_flight[worker] = left
            else:
                self._in_flight.pop(worker, None)

    def queued(self) -> Dict[str, int]:
        """Worker -> the work of the requests this server sent it that have not ended (as
        ``_work_at`` weighs it)."""
        with self._lock:
            return {w: self._work_at(w) for w in self._flights}


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
