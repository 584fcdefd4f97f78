"""Runs the model: the prefill chunks of a step (inference.engine.prefill), the first token of
each request whose prompt they finish, and one batched decode step for all decoding requests.
All of it happens on the engine thread."""

from __future__ import annotations

from time import perf_counter
from typing import List, Optional, Sequence, Tuple

import mlx.core as mx
import numpy as np

from cache.prefix_cache import KVSnapshot

from . import batch_join, batch_leave, cache_io, cpu_attention
from .head_gate import HeadGate
from .lora import AdapterSet
from .model_loader import LoadedModel
from .prefill import Prefill
from .request import Request, RequestStatus, TokenLogprob
from .sampler import RowState, Sampler
from .speculative import SpeculationPolicy, SpeculativeCounters
from .speculative.batch_step import NEW, REPORTED, SpeculativeSteps
from .step_trace import StepClock


class DecodeBatch(SpeculativeSteps):
    """The rows that decode together, their KV in mlx-lm batch caches (left-padded).

    Pipelined like mlx-lm's own generators: a step queues the forward pass for the current
    inputs and returns the tokens of the previous step, which were computed meanwhile. So
    ``inputs[i]`` is row i's next input: the token sampled for it by the last step, or its first
    token when it has just joined (sampled and reported at the end of its prefill:
    ``ModelRunner.first_token``); ``kinds[i]`` says whether the host has seen it.
    Invariant: row i's KV holds all its tokens but ``inputs[i]``; ``kv_len[i]`` counts them.
    ``deltas[i]``: the row's M-RoPE rope delta (a Qwen-VL request with images,
    inference.vision.model), 0 for every other row; passed to the model only when one is not 0.

    With ``snapshot_every`` (the block size, for models with sliding-window or recurrent layers)
    a row that reaches a multiple of it takes a snapshot of those layers into
    ``request.snapshots``: at the end of the request the windows have moved on and the state
    is the final one, and the block cache needs both at every block boundary.

    ``report_first`` (on the CPU): there ``mx.async_eval`` returns only when most of the forward
    pass it queues has run (MLX's CPU stream takes a graph's tasks about as fast as it runs
    them), so queueing step n+1 before handing out step n's tokens would hold every token back
    for most of a step, and a stream's first decode interval would be two steps. So ``step``
    waits for the previous tokens (the tail of their pass, which ran while this step's graph was
    built), returns them, and queues this step's pass only when the caller calls ``launch``
    after reporting them. Elsewhere ``step`` queues the pass before it waits, and ``launch``
    does nothing. And when a row's unreported token is its last by length, ``step`` only
    reports (``_report``): a pass would compute nothing but that token's KV, and the token
    would wait for it.

    ``clock`` (a ``StepClock``) counts the seconds spent queueing passes (``launch``), waiting
    for tokens (``device_wait``) and building the sampling (``sampling``).

    ``speculation`` (a ``SpeculationPolicy``): a step where some active row's drafter has a
    proposal from the tokens on the host is speculative (inference.engine.speculative):
    synchronous, each row's input and draft checked in one pass, and every emitted token
    returned at once, several per row. After a pipelined step the host is one token behind:
    the proposal must then guess the unreported input too (two tokens), the step waits for that
    input, drafts after it and returns it first. Steps where no row has a proposal stay
    pipelined, so free text that drafts nothing costs host lookups only. A row that ended on
    one of its tokens may have KV past its end (the block cache stores only the positions of
    its tokens). With ``snapshot_every`` a row's draft ends on its next block boundary at most.
    The speculative step itself is ``SpeculativeSteps`` (inference.engine.speculative.batch_step).
    """

    def __init__(
        self,
        model,
        sampler: Sampler,
        snapshot_every: Optional[int] = None,
        report_first: bool = False,
        context_length: Optional[int] = None,
        clock: Optional[StepClock] = None,
        adapters: Optional[AdapterSet] = None,
        speculation: Optional[SpeculationPolicy] = None,
    ):
        self.model = model
        self.speculation = speculation
        self.counters = SpeculativeCounters()
        self.verified = False  # whether the last step's pass was a verify pass
        self.adapters = adapters if adapters is not None else AdapterSet(model)
        self.clock = clock if clock is not None else StepClock()
        self.sampler = sampler
        self.snapshot_every = snapshot_every
        self.report_first = report_first
        self.context_length = context_length
        self.passes = 0  # forward passes run (a step that only reports runs none)
        # Whether the model keeps right padding out of its recurrent state (Prefill.together):
        # how a verify pass over such layers is rolled back (speculative.rollback).
        self.padding_ok = True
        self.reports = 0  # steps that only reported tokens
        self._clear()

    def _clear(self) -> None:
        self._unlaunched: Optional[list] = None  # report_first: what launch() queues
        self.rows: List[Request] = []
        self.kv_len: List[int] = []
        self.deltas: List[int] = []
        self._states: List[RowState] = []
        self._caches: Optional[list] = None  # the batch caches (read them through ``_cache``)
        self._joining: List[list] = []  # the caches of rows that joined since: see ``join``
        self._inputs: Optional[mx.array] = None
        self._kinds: List[str] = []  # whether inputs[i] was reported: NEW or REPORTED
        self._logprobs: List[Optional[tuple]] = []

    def __len__(self):
        return len(self.rows)

    @property
    def padded_length(self) -> int:
        return self._cache[0].size() if self._cache else 0

    @property
    def _cache(self) -> Optional[list]:
        """The batch caches (one per layer), the rows that joined since the last read merged in."""
        if self._joining:
            joining, self._joining = self._joining, []
            # Into the spare rows that rows leaving left (batch_join: no copy of the batch), else
            # one merge of the newcomers and one extend of the batch: extending the batch once
            # per row would copy all of its KV once per row (16 rows joining at 3K tokens each
            # cost more than 20 plain steps on the CPU; the first pass after them paid it).
            layers = [list(layer) for layer in zip(*joining)]
            if self._caches is None:
                self._caches = [cache_io.merge_rows(layer) for layer in layers]
            else:
                for batch_cache, layer in zip(self._caches, layers):
                    if not batch_join.join(batch_cache, layer):
                        batch_cache.extend(cache_io.merge_rows(layer))
        return self._caches

    def join(self, request: Request, state: RowState) -> None:
        """Add a request whose caches hold all its tokens but the last, a reported one. Its
        caches are merged into the batch's when they are next read (``_cache``): the rows that
        join in one step are merged together."""
        self._joining.append(request.cache)
        request.cache = None
        token = mx.array([request.all_token_ids[-1]], dtype=mx.uint32)
        self._inputs = token if self._inputs is None else mx.concatenate([self._inputs, token])
        self.rows.append(request)
        self.kv_len.append(request.num_tokens - 1)
        self.deltas.append(request.vision.rope_delta if request.vision is not None else 0)
        self._states.append(state)
        self._kinds.append(REPORTED)
        self._logprobs.append(None)

    def remove(self, requests: Sequence[Request], give_back: bool = False) -> None:
        """Take these requests' rows out of the batch. ``give_back``: their KV's memory is freed
        now (a copy of the staying rows, as mlx-lm's filter makes it), not kept as spare rows
        until the buffers next grow (``batch_leave``)."""
        gone = set(id(r) for r in requests)
        leaving = [i for i, r in enumerate(self.rows) if id(r) in gone]
        if not leaving:
            return
        if len(leaving) == len(self.rows):
            self._clear()
            return
        # The rows that stay keep their slots but those past the new count, which move into the
        # leaving rows' (batch_leave: no copy of the batch's KV where the caches allow it).
        keep = batch_leave.leave_order(len(self.rows), leaving)
        batch_leave.leave(self._cache, keep, in_place=not give_back)
        self._inputs = self._inputs[mx.array(keep)]
        self.rows = [self.rows[i] for i in keep]
        self.kv_len = [self.kv_len[i] for i in keep]
        self.deltas = [self.deltas[i] for i in keep]
        self._states = [self._states[i] for i in keep]
        self._kinds = [self._kinds[i] for i in keep]
        self._logprobs = [self._logprobs[i] for i in keep]

    def extract(self, request: Request) -> KVSnapshot:
        """A snapshot of one row's caches (all its tokens but its next input)."""
        i = self.rows.index(request)
        return cache_io.batch_snapshot(self._cache, i, self.kv_len[i])

    def _take_snapshots(self) -> List[KVSnapshot]:
        """Count this step's input into every row's KV; the snapshots taken at block boundaries
        (their arrays are queued with the step's pass)."""
        every = self.snapshot_every
        taken = []
        for i, request in enumerate(self.rows):
            self.kv_len[i] += 1
            if every and self.kv_len[i] % every == 0:
                taken.append(cache_io.batch_snapshot(self._cache, i, self.kv_len[i], full=False))
                request.snapshots.append(taken[-1])
        return taken

    def step(self, ahead: bool = True) -> List[Tuple[Request, int, Optional[TokenLogprob]]]:
        """Queue one decode step (with ``report_first``: build it, for ``launch`` to queue);
        return the (request, token, logprob) now known on the host: the tokens of the previous
        step, computed while the host handled its results.

        A batch with structured-output rows cannot sample ahead: a row's mask for this step
        depends on its previous token. So the forward pass is queued first, the previous
        tokens are waited for, the matchers advanced and the masks built while the forward
        runs (with ``report_first``: before it runs), and only then is this step's sampling
        queued. Batches without such rows keep the plain pipeline. A matcher advances by each
        token exactly when it reaches the host.

        ``ahead=False``: this step's tokens are waited for and returned too, so nothing is left
        running when the step returns (the engine asks for it while background rows decode: a
        more urgent request arriving meanwhile then waits for one decode step, not two).
        """
        self.verified = False
        if self.report_first and self._last_by_length():
            return self._report()
        if self.speculation is not None and self._speculates():
            late = [kind is NEW for kind in self._kinds]
            began = perf_counter()  # a draft model drafts here: part of the verify step's cost
            if self.speculation.ready(self.rows, self.context_length, late):
                return self._verify(late, perf_counter() - began)
        extra = {"position_deltas": mx.array(self.deltas)} if any(self.deltas) else {}
        with self.adapters.rows([r.adapter_slot for r in self.rows]):  # each row's LoRA adapter
            logits = self.model(self._inputs[:, None], cache=self._cache, **extra)[:, -1, :]
        self.passes += 1
        snapshots = self._take_snapshots()
        previous, kinds, previous_lp = self._inputs, self._kinds, self._logprobs
        matchers = [s.matcher for s in self._states]
        structured = any(m is not None for m in matchers)
        clock = self.clock
        host = masks = None
        if structured:
            if not self.report_first:
                began = perf_counter()
                mx.async_eval(logits)
                clock.launch += perf_counter() - began
            began = perf_counter()
            host = previous.tolist()
            waited = perf_counter()
            clock.device_wait += waited - began
            for i, kind in enumerate(kinds):
                if kind is NEW and matchers[i] is not None:
                    matchers[i].advance(host[i])
            masks = grammar_masks(matchers, self.sampler.vocab_size)
            clock.sampling += perf_counter() - waited
        began = perf_counter()
        tokens, logprobs = self.sampler.sample(logits, self._states, masks)
        sampled = perf_counter()
        clock.sampling += sampled - began
        pending = [
            tokens,
            [x for lp in logprobs if lp is not None for x in lp if x is not None],
            cache_io.snapshot_arrays(snapshots),
        ]
        if self.report_first:
            self._unlaunched = pending
        else:
            mx.async_eval(*pending)
            clock.launch += perf_counter() - sampled
        self._inputs, self._logprobs = tokens, logprobs
        self._kinds = [NEW] * len(self.rows)
        out = []
        if NEW in kinds:
            if host is None:
                began = perf_counter()
                host = previous.tolist()
                clock.device_wait += perf_counter() - began
            out = self._reported(host, kinds, previous_lp)
        if not ahead:
            self.launch()
            began = perf_counter()
            now = tokens.tolist()
            clock.device_wait += perf_counter() - began
            for i, token in enumerate(now):
                if matchers[i] is not None:
                    matchers[i].advance(token)
                out.append((self.rows[i], token, _to_host(logprobs[i], token)))
            self._kinds = [REPORTED] * len(self.rows)
        return out

    def _last_by_length(self) -> bool:
        """Whether a row's unreported token is its last (max_tokens, the context)."""
        return any(
            kind is NEW and request.length_left(self.context_length) <= 1
            for request, kind in zip(self.rows, self._kinds)
        )

    def _report(self) -> List[Tuple[Request, int, Optional[TokenLogprob]]]:
        """Wait for the unreported tokens and return them, queueing no pass: the step after
        runs the batch without the rows they end. (For those rows the pass would compute only
        the KV of their last token, and on the CPU that last token would wait for it.)"""
        self.reports += 1
        began = perf_counter()
        host = self._inputs.tolist()
        self.clock.device_wait += perf_counter() - began
        for state, kind, token in zip(self._states, self._kinds, host):
            if kind is NEW and state.matcher is not None:
                state.matcher.advance(token)
        out = self._reported(host, self._kinds, self._logprobs)
        self._kinds = [REPORTED] * len(self.rows)
        return out

    def _reported(
        self, host: List[int], kinds: List[str], logprobs: list
    ) -> List[Tuple[Request, int, Optional[TokenLogprob]]]:
        """(request, token, logprob) of the rows whose input ``host`` holds and was NEW."""
        return [
            (self.rows[i], host[i], _to_host(logprobs[i], host[i]))
            for i, kind in enumerate(kinds)
            if kind is NEW
        ]

    @property
    def unlaunched(self) -> bool:
        """Whether the last ``step``'s pass is built but not queued yet (``report_first``)."""
        return self._unlaunched is not None

    def launch(self) -> None:
        """Queue the pass of the last ``step`` if it is not queued yet (``report_first``)."""
        if self._unlaunched is not None:
            began = perf_counter()
            mx.async_eval(*self._unlaunched)
            self.clock.launch += perf_counter() - began
            self._unlaunched = None


def grammar_masks(matchers, vocab_size: int) -> np.ndarray:
    """The allowed-token bitmasks of the rows that have a matcher, in row order."""
    active = [m for m in matchers if m is not None]
    masks = np.empty((len(active), (vocab_size + 31) // 32), dtype=np.int32)
    for row, m in zip(masks, active):
        m.fill_mask(row)
    return masks


def _to_host(lp: Optional[tuple], token: int) -> Optional[TokenLogprob]:
    if lp is None:
        return None
    chosen, top_ids, top_lps = lp
    top = list(zip(top_ids.tolist(), top_lps.tolist())) if top_ids is not None else []
    return TokenLogprob(token, chosen.item(), top)


class ModelRunner:
    """Owns the model's forward passes and every request's KV while it is running."""

    def __init__(
        self,
        loaded: LoadedModel,
        block_size: Optional[int] = None,
        clock: Optional[StepClock] = None,
        speculation: Optional[SpeculationPolicy] = None,
    ):
        """``block_size``: the block cache's, when it is on; models with sliding-window or
        recurrent layers then take snapshots at block boundaries (prefill and decode).
        ``clock``: where the decode batch, the prefill and the first tokens count their seconds
        (``StepClock``; the engine's step trace reads it). ``speculation``: which rows draft
        tokens (inference.engine.speculative); None: none."""
        self.loaded = loaded
        self.speculation = speculation
        self.clock = clock if clock is not None else StepClock()
        self.model = loaded.model
        # LoRA adapters attached to the model (inference.engine.lora), chosen per row.
        self.adapters = AdapterSet(self.model)
        self.sampler = Sampler(loaded.vocab_size)
        layout = loaded.cache_layout
        mixed = block_size if layout is not None and not layout.plain else None
        self.snapshot_every = mixed
        # MLX's CPU stream runs a graph about as fast as async_eval queues it (DecodeBatch).
        self.report_first = mx.default_device() == mx.cpu
        self.batch = self._new_batch()
        # Before the checks below, which then run through it: this thread's attention on the CPU.
        self.cpu_attention = cpu_attention.setup(self.model)
        self.gate = HeadGate(self.model)
        self.prefiller = Prefill(loaded, self.gate, block_size, self.clock, self.adapters)
        self.batch.padding_ok = self.prefiller.together

    def _new_batch(self) -> DecodeBatch:
        return DecodeBatch(
            self.model,
            self.sampler,
            self.snapshot_every,
            self.report_first,
            self.loaded.context_length,
            self.clock,
            self.adapters,
            self.speculation,
        )

    def seed_cache(self, request: Request, layers: list, num_tokens: int) -> None:
        """Start a request's caches from a cached prefix of ``num_tokens`` tokens (per layer
        arrays as ``PrefixHit.layers`` gives them)."""
        cache = self.loaded.new_cache()
        cache_io.seed(cache, layers, num_tokens)
        request.cache = cache

    def prefill(self, chunks: Sequence[Tuple[Request, int]], on_done, stop, piece, pass_tokens: int) -> dict:
        """Run the next n not-yet-computed tokens of each (request, n), in forward passes shared
        as the model allows (inference.engine.prefill); ``on_done`` gets the requests whose
        tokens are now all computed, with the logits of their last token, after the pass that
        finished them. Returns {request: snapshots of its caches where its computation
        stopped}. See ``Prefill.run``."""
        return self.prefiller.run(chunks, on_done, stop, piece, pass_tokens)

    def first_tokens(
        self, done: Sequence[Tuple[Request, mx.array]]
    ) -> List[Tuple[Request, int, Optional[TokenLogprob], RowState]]:
        """Sample the next token of each request whose tokens are all computed, from the
        logits of its last token (what ``prefill`` hands to ``on_done``), all in one sampling
        pass with one wait for the host. Returns (request, token, logprob or None, the row's
        sampling state for ``join``) in order."""
        began = perf_counter()
        states = []
        for request, _ in done:
            if request.grammar is not None:  # replayed: after a preemption the output is not empty
                request.matcher = request.grammar.matcher(request.output_token_ids)
            states.append(
                self.sampler.make_row(
                    request.params,
                    request.seed,
                    request.vision.model_ids if request.vision is not None else request.prompt_token_ids,
                    request.output_token_ids,
                    request.matcher,
                )
            )
        matchers = [request.matcher for request, _ in done]
        masks = (
            grammar_masks(matchers, self.sampler.vocab_size) if any(m is not None for m in matchers) else None
        )
        tokens, logprobs = self.sampler.sample(mx.stack([logits for _, logits in done]), states, masks)
        sampled = perf_counter()
        host = tokens.tolist()  # waits for the passes that computed the logits, too
        self.clock.sampling += sampled - began
        self.clock.device_wait += perf_counter() - sampled
        out = []
        for (request, _), token, lp, state in zip(done, host, logprobs, states):
            if request.matcher is not None:
                request.matcher.advance(token)
            request.status = RequestStatus.DECODING
            out.append((request, token, _to_host(lp, token), state))
        return out

    def join(self, request: Request, state: RowState) -> None:
        """Move a request that has its first token into the decode batch."""
        self.batch.join(request, state)

    def kv_snapshot(self, request: Request) -> Optional[KVSnapshot]:
        """What the caches of a running request hold, wherever they are; None without any."""
        if request in self.batch.rows:
            return self.batch.extract(request)
        if request.cache is not None and request.num_computed:
            return cache_io.snapshot(request.cache, request.num_computed)
        return None

    def drop(self, requests: Sequence[Request], give_back: bool = False) -> None:
        """Free the KV of these requests, wherever it is (``give_back``: its memory now, see
        ``DecodeBatch.remove``)."""
        self.batch.remove(requests, give_back)
        for r in requests:
            r.cache = None
            r.snapshots = []

    def decode_step(self, ahead: bool = True):
        """One decode step (``DecodeBatch.step``); call ``launch`` once its tokens are reported."""
        if not len(self.batch):
            return []
        return self.batch.step(ahead)

    def launch(self) -> None:
        self.batch.launch()

    def reset(self) -> None:
        counters = self.batch.counters
        self.batch = self._new_batch()
        self.batch.counters, self.batch.padding_ok = counters, self.prefiller.together
        mx.clear_cache()
