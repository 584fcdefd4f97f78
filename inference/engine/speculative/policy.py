"""Which rows of a decode batch speculate this step, and how many tokens each drafts.

A row speculates when its request asks for it (its ``speculative`` / ``num_draft_tokens``,
else the model's settings), samples from the plain distribution (no penalties: they change
with every accepted token), wants no logprobs and no grammar, and has at least two tokens
left to generate. Every such row has a ``RowSpeculation``: its drafter, its draft length and
an average of how often its drafted tokens are accepted.

Adaptive rule, per row after each verify pass: all drafted tokens kept -> the draft length
doubles (up to the setting), else it becomes one more than what was kept. A row whose
expected tokens per pass, times what a plain decode step costs, is below what a verify pass
costs gains nothing: it stops drafting for a while (``cooldown`` steps, doubling each time it
fails again, up to ``MAX_COOLDOWN``), then tries again. When no row drafts, the batch decodes
plainly (pipelined), so speculation that does not pay costs only the rare retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .drafter import Drafter, make_drafter


@dataclass
class RowSpeculation:
    """Speculation state of one decoding request (it lives on the request while it decodes)."""

    drafter: Drafter
    k: int  # tokens it drafts next time (<= its maximum)
    acceptance: float = 0.6  # average chance that a drafted token is accepted (optimistic start)
    cooldown: int = 0  # plain steps before it drafts again
    backoff: int = 0  # the cooldown it gets when it fails next
    drafted: int = field(default=0)
    accepted: int = field(default=0)

    def expected_tokens(self, k: int) -> float:
        """Tokens a verify pass emits for this row on average: 1 + a + ... + a^k."""
        a = min(self.acceptance, 0.999)
        return (1 - a ** (k + 1)) / (1 - a)


class SpeculationPolicy:
    ALPHA = 0.3  # weight of the newest pass in the acceptance average
    FIRST_COOLDOWN = 8
    MAX_COOLDOWN = 256
    MAX_DRAFT = 16  # the most tokens a row drafts in one pass (the setting's bound)

    def __init__(self, method: str = "off", num_draft_tokens: int = 4, costs=None):
        """``costs``: the scheduler's ``StepCosts`` (what a plain decode step costs); None
        while unknown."""
        self.method = method
        self.num_draft_tokens = num_draft_tokens
        self.costs = costs
        self.verify_seconds: Optional[float] = None  # average wall time of a verify step

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
            p = request.params
            if method == "off" or k < 1 or p.uses_penalties or p.logprobs is not None:
                return None
            if request.grammar is not None or request.vision is not None:
                return None
            state = request.speculation = RowSpeculation(make_drafter(method), k)
        return state

    def wanted(self, rows, context_length: Optional[int]) -> bool:
        """Whether some row drafts this step (cheap: no drafting). Called once per decode step:
        it counts down the rows' cooldowns."""
        wanted = False
        for request in rows:
            state = self.row_state(request)
            if state is None:
                continue
            if state.cooldown > 0:
                state.cooldown -= 1
            elif request.length_left(context_length) > 1:
                wanted = True
        return wanted

    def drafts(self, rows, context_length: Optional[int]) -> List[List[int]]:
        """Each row's draft this step ([] for the rows that do not draft)."""
        out = []
        for request in rows:
            state = self.row_state(request)
            if state is None or state.cooldown > 0:
                out.append([])
                continue
            drafter = state.drafter
            seen, prompt = drafter.seen, len(request.prompt_token_ids)
            if seen < prompt:
                drafter.extend(request.prompt_token_ids[seen:])
                seen = prompt
            drafter.extend(request.output_token_ids[seen - prompt :])
            k = min(state.k, request.length_left(context_length) - 1)
            out.append(drafter.propose(k) if k > 0 else [])
        return out

    def observe(self, rows, drafts: List[List[int]], kept: List[int], seconds: float) -> None:
        """A verify pass: row i drafted ``drafts[i]`` and kept ``kept[i]`` of them; the step
        took ``seconds``."""
        a = self.ALPHA
        self.verify_seconds = (
            seconds if self.verify_seconds is None else (1 - a) * self.verify_seconds + a * seconds
        )
        plain = self.costs.decode_seconds if self.costs is not None else None
        for request, draft, n in zip(rows, drafts, kept):
            if not draft:
                continue
            state = request.speculation
            state.drafted += len(draft)
            state.accepted += n
            observed = n / (n + (n < len(draft)))  # n successes, then one failure unless all kept
            state.acceptance = (1 - a) * state.acceptance + a * observed
            maximum = self.settings_of(request)[1]
            state.k = min(maximum, self.MAX_DRAFT, 2 * state.k) if n == len(draft) else max(1, n + 1)
            if plain is not None and state.expected_tokens(state.k) * plain < self.verify_seconds:
                state.backoff = min(self.MAX_COOLDOWN, max(self.FIRST_COOLDOWN, 2 * state.backoff))
                state.cooldown = state.backoff
                state.acceptance = max(state.acceptance, 0.5)  # its retry gets a fair chance
            elif n:
                state.backoff = 0
