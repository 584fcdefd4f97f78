"""Decides, step by step, which requests run: continuous batching under a token budget and a
KV capacity."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from cache.prefix_cache import PrefixCache

from .config import EngineConfig
from .request import Request, RequestStatus
from .step_costs import StepCosts


@dataclass
class SchedulerOutput:
    """What the engine runs in one step, in this order."""

    # Requests whose KV must be dropped now; they wait to be recomputed.
    preempted: List[Request] = field(default_factory=list)
    # Requests that cannot go on at all: (request, finish reason, error message or None).
    rejected: List[Tuple[Request, str, Optional[str]]] = field(default_factory=list)
    # Newly admitted requests with a cached prefix to load before their first chunk.
    prefix_hits: List[Tuple[Request, object]] = field(default_factory=list)
    # (request, n): run the next n (>= 1) tokens of the request, all in one forward pass where
    # the model allows; a request whose last token this computes samples its next token.
    prefill: List[Tuple[Request, int]] = field(default_factory=list)
    # Rows of the decode batch this step (each generates one token); the engine sets what its
    # decode pass ran: with the rows whose prompts the step's prefill finished, 0 without a pass.
    num_decoding: int = 0
    # Set by the engine too: the wall time of the step's prefill and of its decode step (the
    # step trace's figures, inference.engine.step_trace).
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0


class Scheduler:
    """Continuous batching.

    Each step: every decoding request takes one token of the step's budget; waiting requests
    are admitted, most urgent first, while there is room in ``max_concurrent_requests`` and in
    the KV capacity; prefilling requests then take chunks of what is left, most urgent first
    (the order of the waiting queue, below), so a long prompt is spread over several steps and
    never stalls running streams. Only the most urgent level prefills in a step: while an
    interactive prompt is prefilled, background prompts wait, so its first token does not pay
    for their chunks (their aging bounds the wait).

    Step composition: while requests at least as urgent as the prefill decode, and whenever
    the prefill is background work (priority > 0), the prompt tokens of a step are also capped
    (``_bounded``, ``_allowance``), from the costs measured while serving (``costs``).
    Background prompts, and any prompt when ``max_step_ms`` is set or before the costs are
    known, get what keeps the step near ``max_step_ms`` (0: ``StepCosts.AUTO_STRETCH`` decode
    steps), at least ``StepCosts.MIN_PREFILL_TOKENS`` a step, so every prefill progresses.
    Default-priority prompts are computed whole, one long prompt a step (below). Otherwise a
    step takes the whole token budget.

    Prompts apart (issue 24; priority 0 or below, no ``max_step_ms``, once the costs are known:
    ``_apart``): a step computes at most one long prompt (one whose tokens add more than a
    decode step to a pass: ``StepCosts.prompt_token_seconds``), the oldest of the most urgent,
    and while rows decode the step after it computes none (a decode step runs between two long
    prompts). Prompts that arrive together thus start their streams at least two decode steps
    apart, their answers end that far apart, and their clients' next turns (an agent sends one
    as soon as its answer is whole) arrive during a decode step instead of behind another
    arrival's whole prompt. Short prompts (a cached prefix with a few tokens left) ride with any
    step.

    Priorities (``SamplingParams.priority``, lower is more urgent, as vLLM's): waiting requests
    are ordered by (effective priority, arrival). A request's effective priority improves by one
    for every ``PRIORITY_AGING_STEPS`` steps it has waited, so a background request waiting
    behind a stream of interactive ones is admitted after a bounded number of steps: nothing
    starves. Preemption takes the least urgent running request, the newest among equals.

    Batch wait (``max_batch_wait_ms``): a new request may be held up to that long so that it
    joins a batch with others; it is admitted earlier as soon as the waiting requests would fill
    every free slot. 0 admits at once.
    A waiting request whose prompt shares a whole block or more (beyond what the prefix cache
    holds) with an older request that is prefilling is passed over until that prefill has
    stored its KV, then admitted as a cache hit: a prefix is computed once, not once per
    request (``share_inflight_prefixes``). Requests behind it are admitted meanwhile.

    KV capacity is counted in token slots the way the decode batch stores them: n running
    requests take n x (longest of them + 1). When the running requests outgrow it, the least
    urgent, newest one is preempted (its KV dropped, its tokens kept) and goes back to the
    waiting queue, where its arrival puts it ahead of newer requests of its priority: the most
    urgent, oldest request always progresses, so nothing deadlocks. A request that cannot fit
    even alone is rejected.

    Memory pressure (the memory guard, inference/pool/memory_guard.py): while ``hold`` is set,
    waiting requests are admitted only when nothing runs, so the running batch stops growing but
    the most urgent request still progresses; ``shed_for_memory`` asks the next step to preempt
    the least urgent, newest half of the running requests (never the last one), whose KV goes to
    the prefix cache as with any preemption. When the hold ends (``end_hold``), the requests it
    kept waiting are admitted one per step (``trickle``), so memory climbs back gradually and the
    guard sees it between steps.
    """

    PRIORITY_AGING_STEPS = 64

    def __init__(
        self,
        config: EngineConfig,
        kv_capacity: int,
        prefix_cache: PrefixCache,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config
        self.kv_capacity = kv_capacity
        self.prefix_cache = prefix_cache
        self.clock = clock  # seconds; tests step it by hand
        self.steps = 0
        self.waiting: List[Request] = []  # most urgent first (see _order)
        self.prefilling: List[Request] = []  # admission order
        self.decoding: List[Request] = []  # decode batch order
        self.num_preemptions = 0
        self.costs = StepCosts()  # the engine reports every step (observe)
        self.hold = False  # memory pressure: admit only when nothing runs
        self.trickle = False  # after a hold: admit one request per step until none waits
        self._shed = 0  # running requests the next step preempts for memory
        self.num_memory_preemptions = 0
        self.after_prompt = False  # the last step finished a long prompt (``_apart``)

    # -- bookkeeping called by the engine ----------------------------------------------------

    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        request.num_computed = 0
        if request.queued_at is None:
            request.queued_at, request.queued_step = self.clock(), self.steps
        self.waiting.append(request)

    def _urgency(self, r: Request) -> tuple:
        """(effective priority, arrival): the priority improves by one per
        ``PRIORITY_AGING_STEPS`` steps since the request was first queued."""
        return r.params.priority - (self.steps - r.queued_step) // self.PRIORITY_AGING_STEPS, r.arrival

    def _order(self) -> None:
        self.waiting.sort(key=self._urgency)

    def _held(self, request: Request, batch_full: bool) -> bool:
        """Whether batch wait still holds this request back (see the class docstring)."""
        wait = self.config.max_batch_wait_ms / 1000
        return not batch_full and bool(wait) and self.clock() - request.queued_at < wait

    def next_release(self) -> Optional[float]:
        """Seconds until batch wait releases the first held request; None when none is held."""
        wait = self.config.max_batch_wait_ms / 1000
        if not self.waiting or not wait:
            return None
        return max(0.0, min(r.queued_at for r in self.waiting) + wait - self.clock())

    def started_decoding(self, request: Request) -> None:
        self.prefilling.remove(request)
        self.decoding.append(request)

    def finish(self, request: Request) -> None:
        for queue in (self.waiting, self.prefilling, self.decoding):
            if request in queue:
                queue.remove(request)
        request.status = RequestStatus.FINISHED

    def find(self, request_id: str) -> Optional[Request]:
        for queue in (self.waiting, self.prefilling, self.decoding):
            for r in queue:
                if r.request_id == request_id:
                    return r
        return None

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.decoding)

    @property
    def running(self) -> List[Request]:
        return self.prefilling + self.decoding

    def kv_demand(self, requests: List[Request]) -> int:
        """Token slots these requests take in the decode batch after one more step."""
        if not requests:
            return 0
        return len(requests) * (max(r.num_tokens for r in requests) + 1)

    def fits_alone(self, request: Request) -> bool:
        return self.kv_demand([request]) <= self.kv_capacity

    # -- the step ---------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        self.steps += 1
        self._preempt_until_fits(out)
        self._preempt_for_memory(out)
        self._order()

        budget = self.config.step_token_budget - len(self.decoding)
        out.num_decoding = len(self.decoding)
        if budget > 0:
            self._admit(out)
        prefilling = sorted(self.prefilling, key=self._urgency)
        long_prompt = None
        if prefilling and (apart := self._apart(prefilling)) is not None:
            prefilling, long_prompt = apart
        if prefilling and self._bounded(self._urgency(prefilling[0])[0]):
            allowance = self._allowance(self._urgency(prefilling[0])[0])
            if allowance is not None:
                budget = min(budget, allowance)
        # The budget goes to the prefills most urgent first; while a more urgent prompt is being
        # prefilled, less urgent ones wait (their aging bounds how long: nothing starves).
        top = None
        for r in prefilling:
            level = self._urgency(r)[0]
            if budget <= 0 or (top is not None and level > top):
                break
            top = level
            n = min(r.num_to_prefill, self.config.prefill_chunk_size, budget)
            out.prefill.append((r, n))
            budget -= n
        # A step that finishes a long prompt starts a stream: the next one starts none while rows decode.
        self.after_prompt = any(r is long_prompt and n == r.num_to_prefill for r, n in out.prefill)
        return out

    def _apart(self, prefilling: List[Request]) -> Optional[Tuple[List[Request], Optional[Request]]]:
        """The prefills of the most urgent level that this step may compute, and the long prompt
        among them if any (the class docstring, "Prompts apart"): every short one (its tokens take
        at most a decode step), and the first long one unless the step before finished a long
        prompt and rows decode. None where the rule does not apply (background prompts,
        ``max_step_ms`` set, costs not yet measured)."""
        level = self._urgency(prefilling[0])[0]
        decode = self.costs.decode_seconds
        if level > 0 or self.config.max_step_ms > 0 or not self.costs.measured():
            return None
        chosen, long_prompt = [], None
        token = self.costs.prompt_token_seconds()
        for r in prefilling:
            if self._urgency(r)[0] > level:
                break
            if min(r.num_to_prefill, self.config.prefill_chunk_size) * token <= decode:
                chosen.append(r)
            elif long_prompt is None and not (self.after_prompt and self.decoding):
                chosen.append(r)
                long_prompt = r
        return chosen, long_prompt

    def _allowance(self, level: int) -> Optional[int]:
        """The prompt tokens of a bounded step (``_bounded``) that prefills at effective priority
        ``level``; None: no bound but the budget. Prompts at priority 0 or below, without
        ``max_step_ms``, once the costs are known: whole (``_apart`` chose which). Background
        prompts, with ``max_step_ms``, or before the costs are known: the step-time target
        (``StepCosts.prefill_allowance``)."""
        if level <= 0 and self.config.max_step_ms <= 0 and self.costs.measured():
            return None
        return self.costs.prefill_allowance(self.config.max_step_ms)

    def _bounded(self, level: int) -> bool:
        """Whether a step that prefills at effective priority ``level`` keeps to the step-time
        target: when a stream at least as urgent is decoding (its inter-token latency is what
        the bound protects), or when the prefill is background work (``level`` > 0), so that an
        interactive request arriving meanwhile waits at most about one such step. An urgent
        prompt next to background streams only, or default-priority prompts with nothing
        decoding, take the whole budget."""
        return level > 0 or any(self._urgency(r)[0] <= level for r in self.decoding)

    def _admit(self, out: SchedulerOutput) -> None:
        """Move waiting requests into ``prefilling``, most urgent first, while there is room;
        look each up in the prefix cache."""
        i = 0
        admitted = 0
        # The waiting requests fill every free slot: batch wait holds none of them back.
        batch_full = len(self.waiting) >= self.config.max_concurrent_requests - len(self.running)
        while i < len(self.waiting) and len(self.running) < self.config.max_concurrent_requests:
            r = self.waiting[i]
            if (self.hold and self.running) or (self.trickle and admitted):
                break
            if self._held(r, batch_full):
                i += 1
                continue
            if not self.fits_alone(r):
                self.waiting.pop(i)
                r.status = RequestStatus.FINISHED
                out.rejected.append(
                    (
                        r,
                        "error",
                        f"the request needs {r.num_tokens + 1} KV token "
                        f"slots, more than the KV cache holds ({self.kv_capacity})",
                    )
                )
                continue
            if self.waits_for_shared_prefill(r):
                i += 1
                continue
            if self.kv_demand(self.running + [r]) > self.kv_capacity:
                break
            self.waiting.pop(i)
            self.prefilling.append(r)
            if r.admitted_at is None:
                r.admitted_at = time.perf_counter()
            admitted += 1
            r.status = RequestStatus.PREFILLING
            hit = self.prefix_cache.lookup(r.all_token_ids, max_tokens=r.num_tokens - 1, salt=r.cache_salt)
            if hit is not None and hit.num_tokens > 0:
                out.prefix_hits.append((r, hit))
                r.num_computed = hit.num_tokens
                if r.num_preemptions == 0:
                    r.cached_hot_tokens = min(hit.hot_tokens, len(r.prompt_token_ids))
                    r.cached_cold_tokens = min(hit.cold_tokens, len(r.prompt_token_ids) - r.cached_hot_tokens)
        self.trickle = self.trickle and bool(self.waiting)

    def waits_for_shared_prefill(self, request: Request) -> bool:
        """Whether an older request now prefilling shares at least one whole block of this
        request's prompt and will store KV of it beyond what the cache holds: a whole block
        more, or any more when that prefill ends with its next chunk (identical prompts then
        reuse all but their last token). Admitting this request now would compute that part
        twice. Short prompts that share only a chat template's opening never wait, nor do requests
        of another cache salt.

        Only older requests that are prefilling count, and they progress (prefills are served
        most urgent first, and aging makes every prefill the most urgent within a bounded
        number of steps), so a request waits at most until they are done; if one is preempted
        or aborted it no longer counts and this one goes on by itself.
        """
        if not (self.config.share_inflight_prefixes and self.prefix_cache.wants_kv):
            return False
        wanted = request.all_token_ids[: request.num_tokens - 1]
        best, ending = 0, 0  # longest shared prefix with any owner; with an owner ending now
        for owner in self.prefilling:
            # Another salt's blocks are not this request's to reuse (cache.block_key.salted_root).
            if owner.arrival < request.arrival and owner.cache_salt == request.cache_salt:
                shared = _common_prefix(wanted, owner.all_token_ids[: owner.num_tokens - 1])
                best = max(best, shared)
                if owner.num_to_prefill <= self.config.prefill_chunk_size:
                    ending = max(ending, shared)
        if best < self.config.cache_block_size:
            return False
        cached = self.prefix_cache.peek(wanted, max_tokens=len(wanted), salt=request.cache_salt)
        return best - cached >= self.config.cache_block_size or ending > cached

    def shed_for_memory(self) -> int:
        """Hold admissions and preempt, at the next step, the least urgent, newest half of the
        running requests (rounded down: one running request is never preempted). Returns how
        many will be preempted."""
        self.hold = True
        self._shed = len(self.running) // 2
        return self._shed

    def end_hold(self) -> None:
        if self.hold:
            self.hold, self.trickle = False, True

    @property
    def shedding(self) -> bool:
        """Whether a preemption for memory waits for the next step."""
        return self._shed > 0

    def _preempt_for_memory(self, out: SchedulerOutput) -> None:
        while self._shed > 0 and len(self.running) > 1:
            self._preempt(self.running, out)
            self.num_memory_preemptions += 1
            self._shed -= 1
        self._shed = 0

    def _preempt(self, running: List[Request], out: SchedulerOutput) -> None:
        victim = max(running, key=lambda r: (r.params.priority, r.arrival))
        (self.decoding if victim in self.decoding else self.prefilling).remove(victim)
        victim.num_preemptions += 1
        self.num_preemptions += 1
        out.preempted.append(victim)
        self.add(victim)

    def _preempt_until_fits(self, out: SchedulerOutput) -> None:
        while self.kv_demand(self.running) > self.kv_capacity:
            running = self.running
            if len(running) == 1:
                # Alone and still too big: it cannot grow any further.
                out.rejected.append((running[0], "length", None))
                self.finish(running[0])
                return
            self._preempt(running, out)


def _common_prefix(a: List[int], b: List[int], stride: int = 64) -> int:
    n = min(len(a), len(b))
    i = 0
    while i + stride <= n and a[i : i + stride] == b[i : i + stride]:  # list compares run in C
        i += stride
    while i < n and a[i] == b[i]:
        i += 1
    return i
