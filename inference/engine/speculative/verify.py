"""The speculative step of a decode batch: every row's input token and draft through the target
model in one forward pass ([B, 1 + K]: rows with shorter drafts, or none, are padded and their
padded positions rejected), acceptance per row (``acceptance``), then the rejected positions
rolled back in the caches, whatever their kind (``rollback``). Synchronous: the drafts follow
the inputs, which must be on the host, and the next drafts need this step's tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Sequence

import mlx.core as mx

from ..sampler import RowState
from .acceptance import greedy_tokens, sampled_tokens, sampling_arrays
from .rollback import Rollback


@dataclass
class SpeculativeCounters:
    """Totals since the engine started (read from any thread: /metrics, EngineStats)."""

    drafted: int = 0  # tokens proposed by drafters and checked by the target
    accepted: int = 0  # of those, kept
    verify_passes: int = 0  # forward passes that checked drafts
    emitted: int = 0  # tokens those passes produced (accepted + one per row)

    def snapshot(self) -> dict:
        return {
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "verify_passes": self.verify_passes,
            "emitted_tokens": self.emitted,
        }


def verify_step(
    forward: Callable[[mx.array], mx.array],
    inputs: Sequence[int],
    drafts: Sequence[Sequence[int]],
    states: Sequence[RowState],
    caches,
    counters: SpeculativeCounters,
    padding_ok: bool = True,
) -> List[List[int]]:
    """Run ``forward`` ([B, L] tokens -> [B, L, V] logits over ``caches``) on each row's input
    and draft; return the tokens each row emits (its kept draft tokens and one more), having
    removed the rejected positions from ``caches`` and counted each row's tokens in its
    sampling state. Afterwards row i's caches hold its input and its kept draft tokens; the
    last emitted token is its next input. ``padding_ok``: see ``Rollback``."""
    width = 1 + max(len(d) for d in drafts)
    rows = [[token, *d] + [token] * (width - 1 - len(d)) for token, d in zip(inputs, drafts)]
    rollback = Rollback(caches, padding_ok)  # (before the pass: what a recurrent state must go back to)
    logits = forward(mx.array(rows, dtype=mx.uint32)).astype(mx.float32)
    targets = mx.argmax(logits, axis=-1)
    sampling = {
        i: sampling_arrays(logits[i, : len(d) + 1], d, s)
        for i, (d, s) in enumerate(zip(drafts, states))
        if not s.params.greedy
    }
    lazy = [targets] + [a for arrays in sampling.values() for a in arrays]
    mx.eval(*lazy)
    host = targets.tolist()
    emitted = []
    for i, (draft, state) in enumerate(zip(drafts, states)):
        if i in sampling:
            tokens = sampled_tokens(*(a.tolist() for a in sampling[i]), draft)
        else:
            tokens = greedy_tokens(host[i], draft)
        state.step += len(tokens)
        emitted.append(tokens)
    rollback.apply([width - len(tokens) for tokens in emitted], rows, forward)
    if width > 1:  # (no row drafted: a plain pass)
        counters.verify_passes += 1
        counters.drafted += sum(len(d) for d in drafts)
        counters.accepted += sum(len(t) - 1 for t in emitted)
        counters.emitted += sum(len(t) for t in emitted)
    return emitted
