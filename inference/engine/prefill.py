"""Prompt prefill: the chunks of a step, in as few forward passes as the model's caches allow.

A step gives each prefilling request a chunk (the next n of its not-yet-computed tokens).
``Prefill.run`` computes them and returns what the rest of the engine needs: a snapshot of each
request's caches where its computation stopped (the block cache stores them) and, for each
request whose tokens are now all computed, the logits of its last token (its first generated
token is sampled from them: no forward pass of its own).

Where a computation must stop (``cuts``): at the end of the chunk; for a model with recurrent
layers also at every multiple of the block size on the way (their state exists only where a
computation stops, and the block cache keeps it at block boundaries); for a model with
sliding-window or recurrent layers also one token before the end of the prompt (an identical
prompt later hits up to there and computes only its last token: a hit must leave one).

Together: the rows of a step advance in rounds, each to its next cut. The rows of a round share
forward passes: their caches merged into mlx-lm batch caches (histories of different lengths
left-padded), the pieces right-padded to the longest of the pass (mlx-lm's ``prepare``/
``finalize`` keep the padding out of every row's attention, sliding window and recurrent
state), the rows' caches extracted again. Padding is computed like any token, so a round's rows
are split into passes of similar lengths where that costs less (``passes``): each pass costs
about ``pass_tokens`` prompt tokens more (it reads every weight once more), and each row costs
the width of its pass. A round of equal lengths is one pass; a plain-attention model has one
round a step. The merge and the extraction copy the rows' caches: memory traffic, small next to
the arithmetic.

After each pass the rows whose prompts it finished are handed to ``on_done`` (the engine samples
and sends their first tokens then), not after the step's last pass.

Not every family's layers honour mlx-lm's padding (a recurrent layer that ignores the lengths
mask would fold the padding into its state), so for models with anything but plain attention
the batched path checks itself at load (``_agrees``: two rows with histories of different
lengths and chunks of different lengths, then each continued alone, against the same done
one row at a time) and stays off where it does not reproduce the one-by-one logits; such a
model prefills one request after another, which is correct and slower. Image requests
(``request.vision``) always prefill alone: their tokens enter as embeddings.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import mlx.core as mx

from cache.prefix_cache import KVSnapshot

from . import cache_io
from .head_gate import HeadGate
from .lora import AdapterSet
from .model_loader import LoadedModel
from .request import Request
from .step_trace import StepClock

logger = logging.getLogger("omlx.engine")


class Prefill:
    """See the module docstring. ``together``: whether several rows share forward passes;
    ``forwards`` counts the forward passes run, ``rows`` the rows they computed (one for each
    request and cut): fewer passes than rows is work done together; ``tokens`` the tokens they
    computed, padding included; ``clock.device_wait`` the seconds its ``mx.eval`` waited."""

    def __init__(
        self,
        loaded: LoadedModel,
        gate: HeadGate,
        block_size: Optional[int],
        clock: Optional[StepClock] = None,
        adapters: Optional[AdapterSet] = None,
    ):
        self.loaded = loaded
        self.clock = clock if clock is not None else StepClock()
        self.model = loaded.model
        self.gate = gate
        # LoRA adapters attached to the model (inference.engine.lora), chosen per row of a pass.
        self.adapters = adapters if adapters is not None else AdapterSet(self.model)
        layout = loaded.cache_layout
        self.snapshot_every = block_size if layout is not None and not layout.plain else None
        self.split_at = block_size if layout is not None and layout.has_state else None
        self.forwards = 0
        self.rows = 0
        self.tokens = 0
        self.together = False
        if layout is not None:
            try:
                self.together = layout.plain or self._agrees()
            except Exception:  # a family whose caches do not merge or pad: one by one
                logger.exception("batched prefill check failed")
            if not self.together:
                logger.info(
                    "batched prefill off for %s: prompts prefill one by one", type(self.model).__module__
                )

    def cuts(self, request: Request, n: int) -> List[int]:
        """Where the computation of the next ``n`` tokens of ``request`` stops (see the module
        docstring), ascending; the last is the chunk's end."""
        start, end = request.num_computed, request.num_computed + n
        cuts = [end]
        if self.split_at:
            cuts = list(range((start // self.split_at + 1) * self.split_at, end, self.split_at)) + [end]
        if self.snapshot_every and end == request.num_tokens and end - 1 > max([start] + cuts[:-1]):
            cuts.insert(-1, end - 1)
        return cuts

    def run(
        self,
        chunks: Sequence[Tuple[Request, int]],
        on_done: Callable[[Dict[Request, List[KVSnapshot]], List[Tuple[Request, mx.array]]], None],
        stop: Optional[Callable[[], bool]],
        piece: Optional[int],
        pass_tokens: int,
    ) -> Dict[Request, List[KVSnapshot]]:
        """Compute the next n tokens of each (request, n). Returns {request: snapshots of its
        caches at each cut}. ``on_done(snapshots, finished)`` is called after each pass that
        finished some prompts, with those (request, logits [V] of its last token): their next
        token is sampled from these logits.

        ``stop`` (with ``piece``; both None to run the chunks whole): a check between forward
        passes; the rows are also cut every ``piece`` tokens, each pass is computed before the
        check, and when it says True the rest of the chunks is left for later steps (a
        request's ``num_computed`` says where it stopped). The engine uses it to let a more
        urgent request that arrives meanwhile go first, instead of waiting for a whole step of
        background prefill.

        ``pass_tokens``: what one more forward pass costs, in prompt tokens (``passes``)."""
        for request, _ in chunks:
            if request.cache is None:
                request.cache = self.loaded.new_cache()
        plans = []
        for request, n in chunks:
            cuts = self.cuts(request, n)
            if stop is not None and piece:
                cuts = sorted(set(cuts) | set(range(request.num_computed + piece, cuts[-1], piece)))
            plans.append((request, cuts))
        snapshots = {request: [] for request, _ in chunks}

        def advance(rows, logits) -> bool:
            """Record a pass; True when the rest must wait (``stop``)."""
            finished = []
            for i, (request, n) in enumerate(rows):
                request.num_computed += n
                snapshots[request].append(cache_io.snapshot(request.cache, request.num_computed))
                if request.num_computed == request.num_tokens:
                    finished.append((request, logits[i]))
            if finished:
                # The pass's compute, timed apart from the stores and the first tokens that
                # would otherwise evaluate it (the step trace's ``prefill_compute``).
                began = perf_counter()
                states = [c.state for request, _ in rows if request.cache is not None for c in request.cache]
                mx.eval(states + [lg for _, lg in finished])
                self.clock.prefill_compute += perf_counter() - began
                on_done(snapshots, finished)
            if stop is None:
                return False
            began = perf_counter()
            mx.eval([c.state for request, _ in rows if request.cache is not None for c in request.cache])
            self.clock.device_wait += perf_counter() - began
            return stop()

        if self.together and len(chunks) > 1 and not any(r.vision is not None for r, _ in chunks):
            stopped = False
            while not stopped:  # rounds: every row with a cut left advances to its next one
                rows = [(request, cuts.pop(0) - request.num_computed) for request, cuts in plans if cuts]
                if not rows:
                    break
                for group in passes(rows, pass_tokens):
                    stopped = advance(
                        group, self._forward(group) if len(group) > 1 else self._forward_one(*group[0])
                    )
                    if stopped:
                        break
        else:
            stopped = False
            for request, cuts in plans:
                for cut in cuts:
                    row = (request, cut - request.num_computed)
                    stopped = advance([row], self._forward_one(*row))
                    if stopped:
                        break
                if stopped:
                    break
        began = perf_counter()
        mx.eval([c.state for request, _ in chunks if request.cache is not None for c in request.cache])
        self.clock.device_wait += perf_counter() - began
        return snapshots

    def _forward_one(self, request: Request, n: int) -> "_Lazy":
        """One row's next n tokens on its own caches."""
        start = request.num_computed
        extra = {}
        if request.vision is not None:  # image tokens as embeddings, M-RoPE positions (inference.vision)
            tokens, extra = request.vision.inputs(self.loaded.vision, request.all_token_ids, start, start + n)
        else:
            tokens = mx.array(request.all_token_ids[start : start + n])[None]
        last = mx.array([tokens.shape[1] - 1])
        with self.gate.only(last), self.adapters.rows([request.adapter_slot]):
            out = self.model(tokens, cache=request.cache, **extra)
        self.forwards += 1
        self.rows += 1
        self.tokens += n
        return _Lazy(self.gate, out, last)

    def _forward(self, rows: Sequence[Tuple[Request, int]]) -> "_Lazy":
        """Several rows' next tokens in one pass; each row's caches are replaced by its
        extracted caches."""
        pieces = [r.all_token_ids[r.num_computed : r.num_computed + n] for r, n in rows]
        slots = [r.adapter_slot for r, _ in rows]
        out, last, caches = self._together([r.cache for r, _ in rows], pieces, slots)
        for (request, _), cache in zip(rows, caches):
            request.cache = cache
        self.forwards += 1
        self.rows += len(rows)
        self.tokens += len(rows) * max(n for _, n in rows)
        return _Lazy(self.gate, out, last)

    def _together(self, caches: Sequence[list], pieces: Sequence[List[int]], slots: Sequence[int] = ()):
        """One forward pass of each row's ``pieces[i]`` on top of its ``caches[i]`` (see the
        module docstring), row i with LoRA adapter slot ``slots[i]`` (none: the base): (the
        gated output, the last real position of each row, each row's caches extracted again)."""
        lengths = [len(p) for p in pieces]
        width = max(lengths)
        padding = [width - n for n in lengths]
        batch = [type(layer[0]).merge(list(layer)) for layer in zip(*caches)]
        if max(padding):
            for c in batch:
                c.prepare(lengths=lengths, right_padding=padding)
        tokens = mx.array([p + [0] * (width - len(p)) for p in pieces])
        last = mx.array([n - 1 for n in lengths])
        with self.gate.only(last), self.adapters.rows(slots or [0] * len(pieces)):
            out = self.model(tokens, cache=batch)
        if max(padding):
            for c in batch:
                c.finalize()
        return out, last, [[c.extract(i) for c in batch] for i in range(len(pieces))]

    def _agrees(self) -> bool:
        """Whether two rows prefilled together (histories of 3 and 0 tokens, chunks of 5 and
        2, so padding on both sides) and then each continued alone give the logits the same
        computation gives one row at a time."""
        history, chunks, more = [[1, 2, 3], []], [[4, 5, 6, 7, 8], [9, 10]], [[11, 12], [13, 14]]

        def fresh(i):
            cache = self.loaded.new_cache()
            if history[i]:
                self.model(mx.array([history[i]]), cache=cache)
            return cache

        want = []
        for i in range(2):
            cache = fresh(i)
            first = self.model(mx.array([chunks[i]]), cache=cache)[0, -1]
            want += [first, self.model(mx.array([more[i]]), cache=cache)[0, -1]]
        out, last, caches = self._together([fresh(0), fresh(1)], chunks)
        logits = self.gate.pick(out, last)
        got = []
        for i in range(2):
            got += [logits[i], self.model(mx.array([more[i]]), cache=caches[i])[0, -1]]
        want, got = mx.stack(want).astype(mx.float32), mx.stack(got).astype(mx.float32)
        scale = mx.max(mx.abs(want)).item() or 1.0
        tolerance = 1e-3 if self.loaded.dtype == "float32" else 3e-2
        return mx.max(mx.abs(want - got)).item() <= tolerance * scale


def passes(rows: Sequence[Tuple[Request, int]], pass_tokens: int) -> List[List[Tuple[Request, int]]]:
    """The rows (request, n) of a round split into forward passes at the least estimated cost:
    a pass of B rows padded to width W costs B x W + ``pass_tokens`` prompt tokens. The best split
    puts rows of consecutive widths together: a dynamic programme over the distinct widths,
    shortest first (a pass holds every row of each width it takes)."""
    widths = sorted({n for _, n in rows})
    if len(widths) == 1:
        return [list(rows)]
    count = [sum(1 for _, n in rows if n == w) for w in widths]
    best = [0] + [None] * len(widths)  # best[j]: cost of the first j widths
    start = [0] * (len(widths) + 1)  # where the last pass of that best begins
    for j in range(1, len(widths) + 1):
        rows_in = 0
        for i in range(j, 0, -1):  # the last pass takes widths i-1 .. j-1
            rows_in += count[i - 1]
            cost = best[i - 1] + pass_tokens + rows_in * widths[j - 1]
            if best[j] is None or cost < best[j]:
                best[j], start[j] = cost, i - 1
    bounds, j = [], len(widths)
    while j:
        bounds.append((widths[start[j]], widths[j - 1]))
        j = start[j]
    return [[(r, n) for r, n in rows if lo <= n <= hi] for lo, hi in reversed(bounds)]


class _Lazy:
    """The logits [V] of row i's last token of a forward pass, sliced only when asked for."""

    def __init__(self, gate: HeadGate, out: mx.array, last: mx.array):
        self._gate, self._out, self._last, self._picked = gate, out, last, None

    def __getitem__(self, i: int) -> mx.array:
        if self._picked is None:
            self._picked = self._gate.pick(self._out, self._last)
        return self._picked[i]
