"""Which rows of a decode batch speculate this step, and how many tokens each drafts.

A row speculates when its request asks for it (its ``speculative`` / ``num_draft_tokens``,
else the model's settings), samples from the plain distribution (no penalties: they change
with every accepted token), wants no logprobs and no grammar, and has at least two tokens
left to generate. Every such row has a ``RowSpeculation``: its drafter, its draft length and
an average of how often its drafted tokens are accepted.

Adaptive rule, per row:
- after each verify pass, all drafted tokens kept -> the draft length doubles (up to the
  setting), else it becomes one more than what was kept;
- a row starts *shadow* and turns *active* (it drafts) once its drafter has a proposal; it
  stays active while it pays: its expected tokens per pass, times what a plain
  decode step of the batch costs (below), at least what a verify pass costs (measured
  here). A row that stops paying, or whose drafter found nothing for ``IDLE_DRAFTS`` steps in a
  row, goes back to *shadow*: it decodes plainly (the batch keeps its pipeline when no row is active)
  while its drafter still proposes on the host, and the proposals are checked against the
  tokens that come (no device work). Its average follows those checks, and it becomes
  active again once it would pay. So speculation that does not pay costs only host lookups.
  A verify cost measured ``probe_after`` decode steps ago is stale: the next row that has a
  proposal drafts, and that pass (a *probe*) measures it again (one slow pass must not keep it
  off for good). ``probe_after`` starts at ``PROBE_MIN`` steps and doubles with every probe in a
  row, up to ``PROBE_STEPS``; a pass the rules chose themselves sets it back. So a price that a
  dear pass set (the batch still forming, a loaded moment) is measured again within tens of
  steps, and speculation that does not pay costs one probe per ``PROBE_STEPS`` steps.
- In a batch of two rows or more, a row's draft of k tokens pays when its expected tokens are at
  least what the width rule (below) prices a pass of width k + 1 at, in plain steps; a row alone
  compares them with the measured cost of its verify steps.
- What a plain step costs (in both rules) is a plain decode step of the batch's size
  (``StepCosts.plain_step_seconds``: a median of recent steps of that many rows). Verify steps
  do not measure it, so after ``plain_probe_after`` verify passes with no plain step between them the
  batch runs ``PROBE_PLAIN_STEPS`` plain steps (its rows stay active) to measure it again: a
  price taken before a run of verify steps (a slow step, another batch size) must not keep
  pricing every pass of the run (issue 27: an agent load on the CPU kept verifying at 3-4 plain
  steps a pass for 2.2 tokens a row, against a plain step priced at 2.7x what it cost). Each such
  probe costs the rows the tokens a pass would have given, so ``plain_probe_after`` starts at
  ``PLAIN_PROBE`` and doubles, up to ``PLAIN_PROBE_MAX``, with every probe whose steps cost what
  the price said (within ``PLAIN_DRIFT``); a probe that finds the price moved sets it back.
- Requests that wait for the step to end before their first token can come (``waiting``, set
  by the engine: prompts with chunks left, requests submitted since the step began) wait for its
  verify pass too. A step verifies only when what the pass gains the rows outweighs what it
  costs the waiting requests (``_holds``): each waits ``verify - plain`` longer, and each row
  would finish ``plain - verify / expected tokens`` later if it decoded plainly (a row that
  drafts nothing gains from a plain step). On the CPU, where a pass costs about two plain steps
  for 2-2.5 tokens a row, one waiting request holds a few rows' pass; on a GPU, where a pass
  costs about a plain step, it does not. With a price unknown, the waiting requests come first.
- A client whose answer just ended may send its next turn during the step (an agent's closed
  loop does, a few milliseconds after its answer: ``returns``, ``coming``): until it comes, or
  a short window ends, and while clients come back that way, a step verifies only when a pass
  costs about a plain step (``_awaits_return``), so that the turn does not wait for a dearer
  pass.

Per batch (of two rows or more): every row of a verify pass runs as many positions as the
longest draft, so the drafts are cut to the width with the most expected tokens per unit of
cost over the whole batch (``width``: a drafted position's cost, the median of what the last
``POSITION_WINDOW`` verify passes measured, each against a plain step of its own batch size;
before the first, the prefill's cost of a token); a batch whose best width is 1 decodes
plainly, pipelined.

The batch asks ``ready`` first, from the tokens on the host (in a pipelined batch one token
behind, which the proposal then has to guess too), and only when some row has a proposal waits
for its tokens and asks ``drafts``: a batch with nothing to draft keeps its pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections import deque
from statistics import median
from typing import Deque, List, Optional

from .answers import AnswerStore
from .drafter import Drafter
from .drafters import make_drafter
from .returns import Returns
from .width import best_width, cut, expected_tokens


@dataclass
class RowSpeculation:
    """Speculation state of one decoding request (it lives on the request while it decodes)."""

    drafter: Drafter
    k: int  # tokens it drafts next time (<= its maximum)
    acceptance: float = 0.6  # average chance that a drafted token is accepted (optimistic start)
    active: bool = False  # drafting; False: shadow (proposals only checked on the host)
    idle: int = 0  # steps in a row its drafter proposed nothing
    shadow_at: int = 0  # shadow: how many tokens the drafter had seen at ``shadow_draft``
    shadow_draft: Optional[List[int]] = None
    shadow_next: int = 0  # shadow: no proposal before the drafter has seen this many tokens
    shadow_gap: int = 0  # tokens between a costly drafter's shadow checks (doubles while it does not pay)

    def expected_tokens(self, k: int) -> float:
        """Tokens a verify pass emits for this row on average: 1 + a + ... + a^k."""
        a = min(self.acceptance, 0.999)
        return (1 - a ** (k + 1)) / (1 - a)


class SpeculationPolicy:
    ALPHA = 0.3  # weight of the newest pass in the acceptance average
    IDLE_DRAFTS = 2
    MAX_DRAFT = 16  # the most tokens a row drafts in one pass (the setting's bound)
    MAX_SHADOW_GAP = 64  # the most tokens between the shadow checks of a drafter with a device cost
    # Decode steps after the last verify pass when its measured cost is taken as stale
    # (``probe_after``): a row that would draft then drafts, so one slow pass (a loaded machine)
    # cannot turn speculation off for good. PROBE_MIN after a pass the rules chose, doubling with
    # every probe in a row up to PROBE_STEPS.
    PROBE_STEPS = 256
    PROBE_MIN = 32
    POSITION_WINDOW = 8  # verify passes whose measures of a drafted position give its median
    # Verify passes in a row after which the price of a plain step is measured again, and how
    # many plain steps measure it (a pipelined batch's first step after a verify pass only queues).
    PLAIN_PROBE = 8
    PLAIN_PROBE_MAX = 64
    PLAIN_DRIFT = 0.15  # a probe's steps within this share of the price: the price held
    PROBE_PLAIN_STEPS = 2

    def __init__(self, method: str = "off", num_draft_tokens: int = 4, costs=None):
        """``costs``: the scheduler's ``StepCosts`` (what a plain decode step costs); None:
        no cost rule (rows speculate while their drafters find drafts)."""
        self.method = method
        self.num_draft_tokens = num_draft_tokens
        self.costs = costs
        self.verify_seconds: Optional[float] = None  # average wall time of a verify step
        # Seconds one drafted position of one row adds to a verify step (``width``): measured
        # from the verify passes; None before the first (then the prefill's cost of a token).
        self.position_seconds: Optional[float] = None
        self._positions: Deque[float] = deque(maxlen=self.POSITION_WINDOW)
        self.probe_after = self.PROBE_MIN  # decode steps after a verify pass when its cost is stale
        self.probes = 0  # verify passes run because the cost was stale
        self.draft = None  # the draft model of method "draft" (draft_model.DraftModel), if attached
        self.draft_error: Optional[str] = None  # why none is attached, when one was asked for
        self.shadow_seconds = 0.0  # shadow proposals' time since ``take_shadow_seconds``
        self.since_verify = 0  # decode steps since the last verify pass
        self.unpriced = 0  # verify passes since a plain decode step was last measured
        self._plain_mark = 0  # ``costs.plain_steps`` when ``unpriced`` was last reset
        self.plain_probe_after = self.PLAIN_PROBE  # verify passes in a row before a plain probe
        self._probing: Optional[tuple] = None  # a plain probe under way: (rows, the price before it)
        self.plain_probes = 0  # plain steps taken only to measure a plain step's price
        self.waiting = 0  # the engine: requests whose first token waits for this step to end
        self.returns = Returns()  # the engine: answers just ended whose clients may come back
        self.coming = 0.0  # next turns expected from clients whose answers just ended (``expect``)
        self.return_holds = 0  # plain steps taken because a client's next turn was expected
        self.prompt_holds = 0  # plain steps taken because requests waited (``_holds``)
        self.answers = AnswerStore()  # the model's earlier answers, for "suffix"

    @classmethod
    def of(cls, config, costs=None) -> "SpeculationPolicy":
        """The policy of an ``EngineConfig``."""
        return cls(config.speculative, config.num_draft_tokens, costs)

    def configure(self, method: str, num_draft_tokens: int) -> None:
        self.method, self.num_draft_tokens = method, num_draft_tokens

    def settings_of(self, request) -> tuple:
        """(method, k) for ``request``: its own override over the model's settings."""
        p = request.params
        method = p.speculative if p.speculative is not None else self.method
        k = p.num_draft_tokens if p.num_draft_tokens is not None else self.num_draft_tokens
        return method, k

    def row_state(self, request) -> Optional[RowSpeculation]:
        """The request's speculation state (made on first use); None when it does not speculate."""
        state = request.speculation
        if state is None:
            method, k = self.settings_of(request)
            if (
                method == "off"
                or k < 1
                or not verifiable(request)
                or (method == "draft" and self.draft is None)
            ):
                return None
            drafter = make_drafter(method, self.draft, self.answers, request.cache_salt)
            state = request.speculation = RowSpeculation(drafter, k)
        return state

    def check(self, params) -> None:
        """ValueError for a request whose speculation cannot run here: method "draft" (its
        own or the model's) without a draft model."""
        method = params.speculative if params.speculative is not None else self.method
        if method == "draft" and self.draft is None:
            why = self.draft_error or "set the model's draft_model setting or the server's --draft-model"
            raise ValueError(f"speculative=draft: this model has no draft model ({why})")

    def expect(self, prompts: int, arrivals: int, room: int) -> None:
        """Set ``waiting`` and ``coming`` before a decode step: ``prompts`` requests with prompt
        chunks left and ``arrivals`` requests submitted since the step began (not yet taken in),
        as many as ``room`` (slots free for running requests) admits; and the returns expected
        (``Returns.expected``), when there is room for one."""
        self.waiting = prompts + min(arrivals, room)
        self.coming = self.returns.expected(unmatched=arrivals) if room else 0.0

    def take_shadow_seconds(self) -> float:
        """Seconds the shadow rows' proposals took since the last call (a draft model's passes:
        the engine leaves them out of what a plain decode step costs, which prices drafting)."""
        seconds, self.shadow_seconds = self.shadow_seconds, 0.0
        return seconds

    def prepare(self, request) -> None:
        """``request``'s prompt is done: its drafter takes the prompt now (counted with the
        prompt's time, not its decoding's)."""
        state = self.row_state(request)
        if state is not None:
            _sync(state.drafter, request)
            state.drafter.prepare()

    def _plain(self, rows: int) -> Optional[float]:
        """What a plain decode step of ``rows`` rows costs (None: unknown, or no cost rule)."""
        return self.costs.plain_step_seconds(rows) if self.costs is not None else None

    def _plain_stale(self, rows: int) -> bool:
        """Whether ``plain_probe_after`` verify passes ran since a plain decode step of ``rows``
        rows was last measured (``PROBE_PLAIN_STEPS`` of them since ``unpriced`` was reset): the
        batch then decodes plainly to measure it (a *plain probe*). A probe whose steps cost what
        the price said doubles the passes before the next one; one that found it moved sets them
        back to ``PLAIN_PROBE``."""
        if self.costs is None:
            return False
        if self.costs.plain_steps - self._plain_mark >= self.PROBE_PLAIN_STEPS:
            if self._probing is not None:
                probed_rows, before = self._probing
                steps = self.costs.last_plain_steps(probed_rows, self.PROBE_PLAIN_STEPS)
                held = (  # (a batch that changed size meanwhile: its probe measured another)
                    before is not None
                    and rows == probed_rows
                    and len(steps) == self.PROBE_PLAIN_STEPS
                    and abs(median(steps) - before) <= self.PLAIN_DRIFT * before
                )
                self.plain_probe_after = (
                    min(2 * self.plain_probe_after, self.PLAIN_PROBE_MAX) if held else self.PLAIN_PROBE
                )
                self._probing = None
            self._plain_mark, self.unpriced = self.costs.plain_steps, 0
        stale = self.unpriced >= self.plain_probe_after
        if stale and self._probing is None:
            self._probing = (rows, self._plain(rows))
        return stale

    def _pays(self, state: RowSpeculation, k: int, rows: int) -> bool:
        """Whether drafting ``k`` tokens is expected to beat plain decoding for this row, in a
        batch of ``rows`` rows."""
        plain = self._plain(rows)
        if plain is None or self.verify_seconds is None or self._stale():
            return True
        slope = self._slope(rows)
        if slope is not None:  # a batch: a pass of width k + 1, as the width rule prices it
            return state.expected_tokens(k) >= 1 + slope * k
        return state.expected_tokens(k) * plain >= self.verify_seconds

    def _stale(self) -> bool:
        """Whether the measured verify costs are to be measured again (``probe_after``)."""
        return self.since_verify >= self.probe_after

    def wanted(self, rows, context_length: Optional[int]) -> bool:
        """Whether some row drafts this step (no drafting on the device), and every row can take
        part in a verify pass (``verifiable``). Called once per decode step: the shadow rows
        check their last proposal against the tokens that came."""
        self.answers.fold()
        self.since_verify += 1
        if not all(verifiable(request) for request in rows):
            return False
        wanted = False
        for request in rows:
            state = self.row_state(request)
            if state is None:
                continue
            if not state.active:
                self._shadow(request, state, len(rows))
            if state.active and request.length_left(context_length) > 1:
                wanted = True
        return wanted

    def finished(self, request) -> None:
        """A request ended: its answer goes to the drafts of later "suffix" requests of its
        cache salt, when the model or the request itself uses "suffix"."""
        if self.method == "suffix" or self.settings_of(request)[0] == "suffix":
            self.answers.add(request.output_token_ids, request.cache_salt)

    def _shadow(self, request, state: RowSpeculation, rows: int) -> None:
        """Check a shadow row's pending proposal against the tokens that followed (once they
        all came, or one differed), update its average, make the next proposal."""
        drafter = state.drafter
        _sync(drafter, request)
        draft = state.shadow_draft
        if draft:
            came = _tokens(request, state.shadow_at, len(draft))
            n = 0
            while n < len(came) and came[n] == draft[n]:
                n += 1
            if n < len(came) or len(came) == len(draft):  # decided
                observed = n / (n + (n < len(draft)))
                state.acceptance = (1 - self.ALPHA) * state.acceptance + self.ALPHA * observed
                draft = state.shadow_draft = None
        if not draft:
            if drafter.seen < state.shadow_next:
                return  # a drafter with a device cost waits between its checks
            k = min(self.settings_of(request)[1], drafter.shadow_tokens or self.MAX_DRAFT)
            began = time.perf_counter()
            state.shadow_at, state.shadow_draft = drafter.seen, drafter.propose(k)
            self.shadow_seconds += time.perf_counter() - began
            draft = state.shadow_draft
            # (a draft model's one-token check stands for the drafts it would make when active)
            if draft and self._pays(
                state, self.settings_of(request)[1] if drafter.shadow_tokens else len(draft), rows
            ):
                state.active, state.idle, state.k, state.shadow_draft = True, 0, len(draft), None
                state.shadow_gap = 0
            elif drafter.shadow_tokens:  # a draft model: check less often while it does not pay
                state.shadow_gap = min(2 * state.shadow_gap or 1, self.MAX_SHADOW_GAP)
                state.shadow_next = drafter.seen + len(draft or ()) + state.shadow_gap

    def ready(self, rows, context_length: Optional[int], late: List[bool]) -> bool:
        """Whether some active row's drafter proposes a draft from the tokens on the host. A
        ``late[i]`` row's newest token is still on the device (the batch is pipelined): its
        proposal must guess that token too, so it needs two tokens. Asked before waiting for
        those tokens, so a batch whose rows have nothing to draft keeps its pipeline. A row
        that proposes nothing ``IDLE_DRAFTS`` times in a row goes shadow. Nor does a batch
        whose proposals would not pay for a wider pass (``_fit``: its best width is 1): its
        proposing rows go shadow, so their acceptance follows the tokens that come. Nor, its
        rows left active, a batch whose plain step is to be measured again (``_plain_stale``), or
        whose pass would cost the requests waiting for the step more than it gains the rows
        (``waiting``, ``_holds``)."""
        if self._plain_stale(len(rows)):
            self.plain_probes += 1
            return False
        lengths, acceptances = [], []
        for request, behind in zip(rows, late):
            lengths.append(0)
            acceptances.append(0.0)
            state = self.row_state(request)
            if state is None or not state.active:
                continue
            _sync(state.drafter, request)
            k = min(state.k, request.length_left(context_length) - 1 - behind)
            proposal = state.drafter.propose(k + behind) if k > 0 else []
            state.idle = 0 if proposal else state.idle + 1
            if state.idle >= self.IDLE_DRAFTS:
                state.active = False  # nothing to draft lately: decode plainly, watch in shadow
            lengths[-1], acceptances[-1] = max(0, len(proposal) - behind), state.acceptance
        if not any(lengths):
            return False
        if self.waiting and self._holds(len(rows), lengths, acceptances):
            self.prompt_holds += 1
            return False
        if self._awaits_return(len(rows), max(lengths)):
            self.return_holds += 1
            return False
        slope = self._slope(len(rows))
        if slope is None or best_width(lengths, acceptances, slope) > 1:
            return True
        for request, n in zip(rows, lengths):  # shadow: their acceptance still follows the tokens
            if n:
                request.speculation.active, request.speculation.shadow_draft = False, None
        return False

    def _holds(self, rows: int, lengths: List[int], acceptances: List[float]) -> bool:
        """Whether the ``waiting`` requests lose more to this step's verify pass than its rows
        gain (row i proposes ``lengths[i]`` tokens with acceptance ``acceptances[i]``): each
        waiting request's first token comes ``verify - plain`` later; a row that decodes plainly
        now instead of verifying gets its last token ``plain - verify / expected`` later (it
        needs the tokens it did not get at ``verify / expected`` each), which is negative for a
        row that drafts nothing. Unknown prices (no verify pass or plain step measured, no cost
        rule): the waiting requests come first."""
        plain, verify = self._plain(rows), self.verify_seconds
        if plain is None or verify is None:
            return True
        loss = sum(plain - verify / expected_tokens(a, n) for n, a in zip(lengths, acceptances))
        return self.waiting * (verify - plain) >= loss

    def _awaits_return(self, rows: int, width: int) -> bool:
        """Whether a client's next turn is likely on its way (``coming`` at least one half: an
        answer ended within ``Returns.WINDOW`` and its client is not back yet, and clients came
        back that way) and this step's pass (``rows`` rows, ``width`` drafted positions) would
        cost more than a plain step beyond the prices' noise (``PLAIN_DRIFT``), at the measured
        cost of a drafted position (``position_seconds``; not while either price is unknown,
        nor without a cost rule: the hold is a guess at an arrival, worth it only at a price
        measured to be dear): the step then decodes plainly, so that the turn does not wait
        for a dearer pass. Not weighed against the rows' gain as ``_holds`` weighs the requests
        already waiting: measured in a closed agent loop on the CPU (docs/benchmarks.md,
        "Clients coming back"), the weighing kept these passes (one of 1.4 plain steps for 2.3
        tokens a row) and the time to first token stayed at 1.3x-2.0x plain decoding's; held,
        it came to 1.2x, the answers sooner."""
        if self.coming < 0.5:
            return False
        plain, position = self._plain(rows), self.position_seconds
        return (
            plain is not None and position is not None and position * rows * width > self.PLAIN_DRIFT * plain
        )

    def drafts(self, rows, context_length: Optional[int], pending=None) -> List[List[int]]:
        """Each row's draft this step ([] for the rows that do not draft). ``pending[i]``: row
        i's newest token, just come to the host, which its request does not hold yet (None: the
        request holds all its tokens); the draft follows it."""
        out = []
        for i, request in enumerate(rows):
            state = self.row_state(request)
            if state is None or not state.active:
                out.append([])
                continue
            _sync(state.drafter, request)
            behind = pending is not None and pending[i] is not None
            if behind:  # the request gets it when it is reported: _sync then skips it
                state.drafter.extend([pending[i]])
            k = min(state.k, request.length_left(context_length) - 1 - behind)
            out.append(state.drafter.propose(k) if k > 0 else [])
        return self._fit(rows, out)

    def _slope(self, rows: int) -> Optional[float]:
        """What a drafted position adds to a verify pass of ``rows`` rows, in plain steps of the
        batch (``width``): from the verify passes, else from the prefill's cost of a token
        (``StepCosts.token_seconds``); None when neither is known, or the cost is stale
        (``probe_after``: the batch then drafts uncut, and that pass measures it again), or the
        batch is one row (the per-row rule, ``_pays``, is then the whole batch's; the width
        rule's geometric acceptance cut a copying row's drafts shorter than they paid)."""
        plain = self._plain(rows)
        if rows < 2:
            return None
        seconds = self.position_seconds
        if seconds is None and self.costs is not None:
            seconds = self.costs.token_seconds
        if not plain or seconds is None or self._stale():
            return None
        return rows * seconds / plain

    def _fit(self, rows, drafts: List[List[int]]) -> List[List[int]]:
        """The drafts cut to the batch's best verify width (``width.best_width``), once the
        cost of a drafted position is measured and not stale."""
        slope = self._slope(len(rows))
        if slope is None or not any(drafts):
            return drafts
        acceptances = [r.speculation.acceptance if d else 0.0 for r, d in zip(rows, drafts)]
        return cut(drafts, best_width([len(d) for d in drafts], acceptances, slope))

    def observe(self, rows, drafts: List[List[int]], kept: List[int], seconds: float) -> None:
        """A verify pass: row i drafted ``drafts[i]`` and kept ``kept[i]`` of them; the step
        took ``seconds``."""
        if not any(drafts):
            return  # a plain pass
        a = self.ALPHA
        if self._stale():  # a probe: the next one waits twice as long, unless a pass pays first
            self.probes += 1
            self.probe_after = min(2 * self.probe_after, self.PROBE_STEPS)
        else:
            self.probe_after = self.PROBE_MIN
        self.since_verify = 0
        self.unpriced += 1
        self.verify_seconds = (
            seconds if self.verify_seconds is None else (1 - a) * self.verify_seconds + a * seconds
        )
        plain = self._plain(len(rows))
        if plain and self.costs.plain_step_measured(len(rows)):  # a drafted position's cost
            self._positions.append(max(0.0, seconds - plain) / (max(len(d) for d in drafts) * len(rows)))
            self.position_seconds = median(self._positions)
        for request, draft, n in zip(rows, drafts, kept):
            if not draft:
                continue
            state = request.speculation
            observed = n / (n + (n < len(draft)))  # n successes, then one failure unless all kept
            state.acceptance = (1 - a) * state.acceptance + a * observed
            maximum = self.settings_of(request)[1]
            state.k = min(maximum, self.MAX_DRAFT, 2 * state.k) if n == len(draft) else max(1, n + 1)
            if not self._pays(state, state.k, len(rows)):
                state.active, state.shadow_draft = False, None


def verifiable(request) -> bool:
    """Whether a row's next tokens can come from a verify pass, drafting or not: it samples
    from the model's plain distribution (no grammar mask, no penalties: they change with every
    accepted token), wants no logprobs and has no M-RoPE positions. A batch with another row
    decodes plainly."""
    p = request.params
    return not p.uses_penalties and p.logprobs is None and request.grammar is None and request.vision is None


def _sync(drafter: Drafter, request) -> None:
    """Give the drafter the request's tokens it has not seen (prompt, then output)."""
    seen, prompt = drafter.seen, len(request.prompt_token_ids)
    if seen < prompt:
        drafter.extend(request.prompt_token_ids[seen:])
        seen = prompt
    drafter.extend(request.output_token_ids[seen - prompt :])


def _tokens(request, start: int, n: int) -> List[int]:
    """Up to ``n`` of the request's tokens from position ``start`` (without copying them all)."""
    prompt = request.prompt_token_ids
    if start >= len(prompt):
        return request.output_token_ids[start - len(prompt) : start - len(prompt) + n]
    return (prompt[start : start + n] + request.output_token_ids[:n])[:n]
