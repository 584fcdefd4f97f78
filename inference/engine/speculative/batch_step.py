"""The speculative step of the decode batch (``model_runner.DecodeBatch``): whether a step
speculates (``_speculates``) and the step itself (``_verify``: the drafts, ``verify_step``, the
counts and snapshots after it). A mixin of ``DecodeBatch``, which holds the rows, their caches
and inputs; kept here, next to ``verify``, so the batch's plain decoding stays apart from it."""

from __future__ import annotations

from time import perf_counter
from typing import List, Optional, Tuple

import mlx.core as mx

from .. import cache_io
from ..cache_io import leaves
from ..request import Request, TokenLogprob
from .rollback import cache_arrays, can_roll_back
from .verify import verify_step

NEW = "new"  # a generated token the host has not seen yet
REPORTED = "reported"  # a generated token already reported


class SpeculativeSteps:
    """The speculative steps of ``DecodeBatch`` (see its docstring: ``speculation``)."""

    def _speculates(self) -> bool:
        """Whether some row drafts this step (caches a verify pass can roll back, no M-RoPE rows)."""
        return (
            not any(self.deltas)
            and can_roll_back(self._cache, self.padding_ok)
            and self.speculation.wanted(self.rows, self.context_length)
        )

    def _verify(
        self, late: List[bool], drafting: float = 0.0
    ) -> List[Tuple[Request, int, Optional[TokenLogprob]]]:
        """A speculative step (``verify_step``): every token each row emits, in order, the
        ``late`` rows' unreported input first (the drafts follow it). ``drafting``: seconds the
        proposals took before it (counted in the step's cost)."""
        began = perf_counter()
        inputs = self._inputs.tolist()
        # Work queued on the caches before this step (the last pipelined pass; rows that just
        # joined, merged in) is not the verify pass's cost: the policy prices passes by it.
        mx.eval([a for c in leaves(self._cache) for a in cache_arrays(c)])
        waited = perf_counter()
        self.clock.device_wait += waited - began
        pending = [token if behind else None for token, behind in zip(inputs, late)]
        drafts = self.speculation.drafts(self.rows, self.context_length, pending)
        every = self.snapshot_every
        if every:  # a pass ends at the next block boundary at most: the snapshot is taken there
            drafts = [d[: every - 1 - n % every] for d, n in zip(drafts, self.kv_len)]

        def forward(tokens: mx.array) -> mx.array:
            with self.adapters.rows([r.adapter_slot for r in self.rows]):
                return self.model(tokens, cache=self._cache)

        emitted = verify_step(
            forward, inputs, drafts, self._states, self._cache, self.counters, self.padding_ok
        )
        # Its rollback (a roll of the rows that kept fewer tokens) is this step's cost too.
        mx.eval([a for c in leaves(self._cache) for a in cache_arrays(c)])
        self.passes += 1
        self.verified = True
        snapshots = []
        for i, tokens in enumerate(emitted):
            self.kv_len[i] += len(tokens)
            if every and self.kv_len[i] % every == 0:
                snapshots.append(cache_io.batch_snapshot(self._cache, i, self.kv_len[i], full=False))
                self.rows[i].snapshots.append(snapshots[-1])
        cache_io.materialize(snapshots)
        self._inputs = mx.array([tokens[-1] for tokens in emitted], dtype=mx.uint32)
        self._kinds = [REPORTED] * len(self.rows)
        self._logprobs = [None] * len(self.rows)
        seconds = perf_counter() - waited
        self.clock.device_wait += seconds
        self.speculation.observe(self.rows, drafts, [len(t) - 1 for t in emitted], seconds + drafting)
        return [
            (request, token, None)
            for request, first, tokens in zip(self.rows, pending, emitted)
            for token in ([first] if first is not None else []) + tokens
        ]
