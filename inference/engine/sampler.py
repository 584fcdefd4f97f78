"""Token selection for a batch in which every row has its own sampling parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import mlx.core as mx
import numpy as np

from .grammar import GrammarMatcher, unpack_mask
from .sampling_params import SamplingParams

_MASK = -float("inf")
_BLOCK = 256  # terms per partial sum of log_softmax


def log_softmax(x: mx.array) -> mx.array:
    """log-softmax over the last axis, in ``x``'s dtype (float32 for logprobs), its sum of
    exponentials taken in blocks of 256 terms and then over the blocks. MLX's CPU reductions
    (``mx.logsumexp``, ``mx.sum``) add a row's terms one after another: over SmolLM2's 49,152
    logits that put its float32 logprobs 2e-4 from a float64 evaluation of the same logits,
    where transformers' float32 log_softmax is 2e-5 off; in blocks the error is 2e-5 too. The
    same operations on every device (the GPU's tree reductions gain nothing and lose nothing)."""
    top = mx.stop_gradient(mx.max(x, axis=-1, keepdims=True))
    e = mx.exp(x - top)
    pad = (-x.shape[-1]) % _BLOCK
    if pad:
        e = mx.concatenate([e, mx.zeros((*e.shape[:-1], pad), e.dtype)], axis=-1)
    partial = mx.sum(e.reshape(*e.shape[:-1], -1, _BLOCK), axis=-1)
    return x - (top + mx.log(mx.sum(partial, axis=-1, keepdims=True)))


def step_key(seed: int, step: int) -> mx.array:
    """The PRNG key of a request's ``step``-th sampled token: a function of (seed, step) only,
    so a seeded request samples the same tokens in any batch, and after a preemption."""
    mixed = (seed * 0x9E3779B97F4A7C15 + step * 0xBF58476D1CE4E5B9 + 1) & (2**63 - 1)
    return mx.random.key(mixed)


@dataclass
class RowState:
    """Sampling state of one decoding row, on the device.

    ``counts`` (times each token was generated, for presence/frequency penalties) and
    ``seen`` (1.0 for tokens in prompt or output, for the repetition penalty) exist only
    when the request uses those penalties; ``step`` counts tokens sampled so far, including
    one still being computed. ``matcher`` is the request's grammar position when its output
    is structured: such a row samples only from the tokens its mask allows.
    """

    params: SamplingParams
    seed: int
    step: int
    counts: Optional[mx.array] = None
    seen: Optional[mx.array] = None
    matcher: Optional[GrammarMatcher] = None

    @property
    def plain_greedy(self) -> bool:
        return self.params.greedy and not self.params.uses_penalties and self.matcher is None


class Sampler:
    """Picks the next token of every row; rows that are plain greedy share one argmax."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def make_row(
        self,
        params: SamplingParams,
        seed: int,
        prompt: Sequence[int],
        output: Sequence[int],
        matcher: Optional[GrammarMatcher] = None,
    ) -> RowState:
        row = RowState(params, seed, step=len(output), matcher=matcher)
        if params.presence_penalty or params.frequency_penalty:
            row.counts = self._histogram(output)
        if params.repetition_penalty != 1.0:
            row.seen = mx.minimum(self._histogram(list(prompt) + list(output)), 1.0)
        return row

    def _histogram(self, tokens: Sequence[int]) -> mx.array:
        counts = mx.zeros((self.vocab_size,), dtype=mx.float32)
        if tokens:
            counts = counts.at[mx.array(tokens)].add(1.0)
        return counts

    def sample(
        self, logits: mx.array, rows: List[RowState], masks: Optional[np.ndarray] = None
    ) -> Tuple[mx.array, List[Optional[tuple]]]:
        """logits: [B, V] for the rows in order. Returns lazy tokens [B] (uint32) and, per row,
        None or lazy (chosen logprob, top ids, top logprobs) when the row asked for logprobs.

        ``masks`` ([G, ceil(V / 32)] int32) are the allowed-token bitmasks of the G rows that
        have a matcher, in row order, or None when none has: those rows' disallowed logits
        become -inf, in one operation over the G rows, before anything else."""
        logits = logits.astype(mx.float32)
        greedy = mx.argmax(logits, axis=-1)
        if all(r.plain_greedy for r in rows):
            tokens = greedy
        else:
            constrained = self._constrained(logits, rows, masks)
            picks = []
            for i, r in enumerate(rows):
                if r.plain_greedy:
                    picks.append(greedy[i : i + 1])
                    continue
                x, best = constrained.get(i, (logits[i : i + 1], None))
                if best is not None and r.params.greedy and not r.params.uses_penalties:
                    picks.append(best)
                else:
                    picks.append(self._sample_row(x, r))
            tokens = mx.concatenate(picks)
        tokens = tokens.astype(mx.uint32)
        logprobs = [None] * len(rows)
        for i, r in enumerate(rows):
            r.step += 1
            if r.plain_greedy and r.params.logprobs is None:
                continue  # nothing per row to build: keep the hot path free of graph nodes
            if r.params.logprobs is not None:
                logprobs[i] = self._logprobs(logits[i], tokens[i], r.params.logprobs)
            self._count(r, tokens[i])
        return tokens, logprobs

    @staticmethod
    def _constrained(logits: mx.array, rows: List[RowState], masks: Optional[np.ndarray]) -> dict:
        """{row index: (masked logits [1, V], lazy argmax [1])} for the rows with a matcher."""
        index = [i for i, r in enumerate(rows) if r.matcher is not None]
        if not index:
            return {}
        masked = mx.where(
            unpack_mask(mx.array(masks), logits.shape[-1]),
            logits[mx.array(index)] if len(index) < len(rows) else logits,
            _MASK,
        )
        best = mx.argmax(masked, axis=-1)
        return {i: (masked[g : g + 1], best[g : g + 1]) for g, i in enumerate(index)}

    def _sample_row(self, x: mx.array, row: RowState) -> mx.array:
        p = row.params
        if row.seen is not None:
            penalized = mx.where(x > 0, x / p.repetition_penalty, x * p.repetition_penalty)
            x = mx.where(row.seen > 0, penalized, x)
        if row.counts is not None:
            x = x - p.frequency_penalty * row.counts - p.presence_penalty * (row.counts > 0)
        if p.greedy:
            return mx.argmax(x, axis=-1)
        x = self.filtered(x, p)
        noise = mx.random.gumbel(shape=x.shape, key=step_key(row.seed, row.step))
        return mx.argmax(x + noise, axis=-1)

    @staticmethod
    def filtered(x: mx.array, p: SamplingParams) -> mx.array:
        """Logits [N, V] (after penalties) as the row samples from them: divided by the
        temperature, with the tokens that top-k, top-p and min-p exclude at -inf. Speculative
        decoding (inference.engine.speculative.acceptance) accepts drafts against these."""
        x = x / p.temperature
        if p.top_k and p.top_k < x.shape[-1]:
            kth = mx.min(mx.topk(x, p.top_k, axis=-1), axis=-1, keepdims=True)
            x = mx.where(x < kth, _MASK, x)
        if p.top_p < 1.0:
            order = mx.argsort(-x, axis=-1)
            sorted_x = mx.take_along_axis(x, order, axis=-1)
            probs = mx.softmax(sorted_x, axis=-1)
            before = mx.cumsum(probs, axis=-1) - probs  # mass of strictly more likely tokens
            kept = mx.sum(before < p.top_p, axis=-1, keepdims=True)
            cutoff = mx.take_along_axis(sorted_x, kept - 1, axis=-1)
            x = mx.where(x < cutoff, _MASK, x)
        if p.min_p > 0.0:
            cutoff = mx.max(x, axis=-1, keepdims=True) + math.log(p.min_p)
            x = mx.where(x < cutoff, _MASK, x)
        return x

    @staticmethod
    def _logprobs(x: mx.array, token: mx.array, n: int) -> tuple:
        lp = log_softmax(x)
        chosen = lp[token]
        if n == 0:
            return chosen, None, None
        top = mx.argpartition(-lp, kth=n - 1)[:n]
        top = top[mx.argsort(-lp[top])]
        return chosen, top, lp[top]

    @staticmethod
    def _count(row: RowState, token: mx.array) -> None:
        if row.counts is not None:
            row.counts = row.counts.at[token].add(1.0)
        if row.seen is not None:
            row.seen = row.seen.at[token].add(1.0)
