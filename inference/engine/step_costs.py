"""What a step costs on this model and machine, learned while serving; the scheduler uses it to
keep steps near a target time while requests are decoding (``max_step_ms``).

A step's wall time is modelled as ``decode + prefill_tokens / prefill_rate``: ``decode`` is what a
step of the current decode batch costs with no prefill (the engine's steps without prefill
measure it directly), ``prefill_rate`` the prompt tokens per second a step adds on top (measured
from steps with prefill, less the decode estimate). Both are exponential moving averages, so
they follow the batch size, the prompt lengths and the machine's load. The decode batch is
pipelined (a step returns the previous step's tokens), so a single step's split between the two
is blurred; over several steps the averages are what the time bound needs.

Speculative decoding prices a verify pass against a plain decode step of the same batch
(``plain_step_seconds``): the median of the last ``PLAIN_WINDOW`` steps without prompt tokens
of that many rows. Not the average above: under an agent load the batch size changes as
requests come and go, and one slow step (a prompt's arrival, a loaded machine) would price
every verify pass after it (issue 27: measured 57.8 ms against 15-25 ms plain steps).
``plain_steps`` counts those steps, so the policy can tell when its price was last measured.

Where a forward pass costs far more than the tokens in it (a GPU: on an H200 a prefill step of
32 tokens took 55 ms, one of 2,048 tokens 36-52 ms, a pipelined decode step 8 ms),
``token_seconds`` (a step less one decode-priced pass, at least half the step) says a token
costs a millisecond where it costs microseconds; ``prompt_token_seconds`` takes the slope of
the recent prefill steps' times against their tokens instead, which is what one more prompt
in a pass adds.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Deque, Dict, Optional, Tuple


class StepCosts:
    ALPHA = 0.25  # weight of the newest observation
    # The time bound without a setting: a step may take this many times a pure decode step, so
    # running streams slow down at most about that much while prompts are prefilled.
    AUTO_STRETCH = 4.0
    # Prompt tokens a step always grants while streams decode, however tight the bound: every
    # prefill progresses.
    MIN_PREFILL_TOKENS = 32
    # Background prefill is cut this finely before any speed is known (``piece_tokens``), and
    # a forward pass is priced at this many prompt tokens (``pass_tokens``).
    DEFAULT_PIECE = 128
    SMALL_BATCH = 4  # decode steps of at most this many rows measure ``pass_seconds``
    PLAIN_WINDOW = 8  # plain decode steps of one batch size that ``plain_step_seconds`` keeps
    PREFILL_WINDOW = 16  # prefill steps whose (tokens, seconds) ``prompt_token_seconds`` fits
    PREFILL_SPREAD = 2.0  # ... when the largest computed at least this many times the smallest

    def __init__(self):
        self.decode_seconds: Optional[float] = None  # one step of the decode batch alone
        self.decode_rows = 0  # the batch size that estimate was last measured at
        self.prefill_rate: Optional[float] = None  # prompt tokens per second within a step
        # How the prefill prices a forward pass against padding (``pass_tokens``): a pass costs
        # ``pass_seconds`` whatever it computes (it reads every weight once), and each token it
        # computes, padding included, ``token_seconds`` more. ``pass_seconds`` comes from decode
        # steps of at most SMALL_BATCH rows (in a larger one the rows' arithmetic overlaps the
        # reading of the weights), ``token_seconds`` from prefill steps, less their passes.
        self.pass_seconds: Optional[float] = None
        self.token_seconds: Optional[float] = None
        self.plain_steps = 0  # decode steps without prompt tokens observed (``plain_step_seconds``)
        self._recent: Dict[int, Deque[float]] = {}  # rows -> the last PLAIN_WINDOW such steps
        # (tokens computed, seconds less the decode) of the last PREFILL_WINDOW prefill steps
        self._prefills: Deque[Tuple[int, float]] = deque(maxlen=self.PREFILL_WINDOW)

    def _mix(self, old: Optional[float], new: float) -> float:
        return new if old is None else (1 - self.ALPHA) * old + self.ALPHA * new

    def observe(
        self, decode_rows: int, prefill_tokens: int, seconds: float, passes: int = 0, computed: int = 0
    ) -> None:
        """One engine step: the rows it decoded, the prompt tokens it computed, its wall time;
        with the forward passes its prefill ran and the tokens they computed (padding included)."""
        if seconds <= 0:
            return
        if prefill_tokens == 0:
            if decode_rows:
                self.decode_seconds = self._mix(self.decode_seconds, seconds)
                self.decode_rows = decode_rows
                self.plain_steps += 1
                recent = self._recent.setdefault(decode_rows, deque(maxlen=self.PLAIN_WINDOW))
                recent.append(seconds)
            if 0 < decode_rows <= self.SMALL_BATCH:
                rows = decode_rows * (self.token_seconds or 0.0)
                self.pass_seconds = self._mix(self.pass_seconds, max(seconds - rows, seconds / 2))
            return
        decode = self.decode_seconds if decode_rows and self.decode_seconds else 0.0
        spent = seconds - decode
        if spent > 0:
            self.prefill_rate = self._mix(self.prefill_rate, prefill_tokens / spent)
            if computed:
                self._prefills.append((computed, spent))
            if self.pass_seconds is not None and computed:
                tokens = max(spent - passes * self.pass_seconds, spent / 2)
                self.token_seconds = self._mix(self.token_seconds, tokens / computed)

    def prompt_token_seconds(self) -> Optional[float]:
        """What one more prompt token adds to a prefill step: the least-squares slope of the
        last ``PREFILL_WINDOW`` prefill steps' seconds against the tokens they computed, where
        those spread enough to tell (the most at least ``PREFILL_SPREAD`` times the fewest), 0
        where the slope is not positive (the tokens cost less than the steps vary), and never
        more than ``token_seconds``; ``token_seconds`` where they do not spread (the module
        docstring: the two part ways where a pass costs far more than its tokens).
        ``Scheduler._apart`` tells a long prompt from a short one by it."""
        if self.token_seconds is None:
            return None
        points = list(self._prefills)
        xs = [x for x, _ in points]
        if len(points) < 3 or max(xs) < self.PREFILL_SPREAD * min(xs):
            return self.token_seconds
        mean_x = sum(xs) / len(xs)
        mean_y = sum(y for _, y in points) / len(points)
        var = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
        return min(max(slope, 0.0), self.token_seconds)

    def plain_step_seconds(self, rows: int) -> Optional[float]:
        """What a plain decode step of ``rows`` rows costs: the median of the last
        ``PLAIN_WINDOW`` steps of that batch size; ``decode_seconds`` (any batch size) before one
        was measured."""
        recent = self._recent.get(rows)
        return median(recent) if recent else self.decode_seconds

    def last_plain_steps(self, rows: int, n: int) -> list:
        """The seconds of the last ``n`` (at most) plain steps of ``rows`` rows, oldest first."""
        recent = self._recent.get(rows)
        return list(recent)[-n:] if recent else []

    def plain_step_measured(self, rows: int) -> bool:
        """Whether ``plain_step_seconds(rows)`` comes from steps of that batch size (not the
        average over every size it falls back to)."""
        return bool(self._recent.get(rows))

    def prefill_allowance(self, max_step_ms: float) -> Optional[int]:
        """Prompt tokens one step may compute next to the running decode batch so that the step
        takes about the target time: ``max_step_ms`` if > 0, else ``AUTO_STRETCH`` decode steps.
        None (no bound) until both speeds have been measured."""
        if self.decode_seconds is None or self.prefill_rate is None:
            return None
        target = max_step_ms / 1000 if max_step_ms > 0 else self.AUTO_STRETCH * self.decode_seconds
        tokens = int((target - self.decode_seconds) * self.prefill_rate)
        return max(self.MIN_PREFILL_TOKENS, tokens)

    def measured(self) -> bool:
        """Whether a decode step, a pass and a prompt token have been measured (before that
        ``Scheduler._apart`` does not apply)."""
        return None not in (self.decode_seconds, self.pass_seconds, self.token_seconds)

    def piece_tokens(self) -> int:
        """Prompt tokens that take about one decode step: how finely background prefill is cut
        so that a more urgent request arriving meanwhile waits at most about that long
        (``DEFAULT_PIECE`` until both speeds are known)."""
        if self.decode_seconds is None or self.prefill_rate is None:
            return self.DEFAULT_PIECE
        return max(self.MIN_PREFILL_TOKENS, int(self.decode_seconds * self.prefill_rate))

    def pass_tokens(self) -> int:
        """What one more forward pass costs, in prompt tokens (``pass_seconds`` /
        ``token_seconds``): how the prefill weighs padding against one more pass
        (inference.engine.prefill.passes). ``DEFAULT_PIECE`` until both are measured: too few
        passes only leave the padding one pass would have had anyway; too many cost a pass each."""
        if self.pass_seconds is None or self.token_seconds is None:
            return self.DEFAULT_PIECE
        return max(1, round(self.pass_seconds / self.token_seconds))

    def snapshot(self) -> dict:
        return {
            "decode_step_seconds": self.decode_seconds,
            "decode_rows": self.decode_rows,
            "prefill_tokens_per_second": self.prefill_rate,
            "pass_seconds": self.pass_seconds,
            "token_seconds": self.token_seconds,
            "prompt_token_seconds": self.prompt_token_seconds(),
        }
