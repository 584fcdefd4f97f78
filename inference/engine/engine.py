"""The engine: one loaded model, one thread that does all of its MLX work, and a queue of
requests that stream their tokens back."""

from __future__ import annotations

import itertools
import logging
import queue
import random
import threading
import time
from typing import Callable, List, Optional

import mlx.core as mx

from cache.block_key import adapter_salt
from cache.prefix_cache import PrefixCache

from .config import EngineConfig
from .controls import EngineControls, give_back_memory
from .engine_cache import EngineCache
from .engine_prompts import EnginePrompts, Prompt
from .engine_thread import EngineThread
from .grammar import compiler_for
from .model_loader import LoadedModel, load_model
from .model_runner import ModelRunner
from .request import Request, RequestOutput, RequestStatus
from .request_stream import RequestStream
from .sampling_params import SamplingParams
from .scheduler import Scheduler
from .speculative import SpeculationPolicy
from .stats import EngineStats, read_stats
from .step_trace import StepClock, StepRecord, StepTrace
from .text_stream import TextStream, streaming_detokenizer

logger = logging.getLogger("omlx.engine")
_ids = itertools.count()


class Engine(EnginePrompts, EngineCache, EngineControls, EngineThread):
    """Serves one model. ``submit`` may be called from any thread; everything that touches
    MLX runs on the engine's own thread (MLX streams are not thread-safe).

    The loop: take new requests and aborts from the inbox, ask the scheduler for a step,
    drop the KV of preempted requests, run prefill chunks, move finished prefills into the
    decode batch, run one batched decode step, and publish each request's new tokens.
    """

    CLEAR_CACHE_STEPS = 512  # memory is given back this often (and whenever idle): give_back_memory

    def __init__(self, model_path, config: Optional[EngineConfig] = None, **settings):
        if config is None:
            config = EngineConfig(**settings)
        elif settings:
            raise ValueError("pass either config or individual settings, not both")
        self.config = config
        self.prefix_cache: PrefixCache = PrefixCache()
        self._tokenizer_lock = threading.Lock()
        self.loaded: Optional[LoadedModel] = None
        self.steps = 0  # counters for tests, benchmarks and (later) the admin panel
        self.prefill_chunks = 0  # prompt chunks computed
        self.first_tokens = 0  # prompts finished (their first tokens sampled)
        # Seconds by kind of work, always counted; kept per step only with config.step_trace.
        self.clock = StepClock()
        self._trace: Optional[StepTrace] = StepTrace(config.step_trace) if config.step_trace else None
        # The most urgent priority submitted since the engine last drained its inbox (None:
        # nothing): a background prefill checks it between its pieces (_yields_to_arrival).
        self._arrived: Optional[int] = None
        self._arrivals = 0  # requests submitted since then (the speculation policy's ``waiting``)
        # Set by the memory guard while memory is critical: a step then runs one prefill chunk
        # (the most urgent), so a step that began before the pressure cannot run past the limit.
        self.memory_critical = threading.Event()
        self._start("omlx-engine", model_path)

    # -- public API (any thread) -------------------------------------------------------------

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    def encode(self, text: str) -> List[int]:
        with self._tokenizer_lock:
            return list(self.loaded.tokenizer.encode(text))

    def submit(
        self,
        prompt: Prompt,
        params: Optional[SamplingParams] = None,
        request_id: Optional[str] = None,
        callback: Optional[Callable[[RequestOutput], None]] = None,
        vision=None,
        checked: bool = False,
        cache_salt: Optional[str] = None,
        adapter: Optional[str] = None,
    ) -> RequestStream:
        """Queue a request; raises ValueError for a bad prompt or parameters. ``vision``: a
        prompt with images (inference.vision.prompt.VisionPrompt; ``prompt`` is then its key ids).
        ``cache_salt``: its prefix-cache namespace (None: the unsalted cache).
        ``adapter``: the name of an attached LoRA adapter (``attach_adapter``) it runs with.
        ``checked``: the caller validated the prompt already (``validate_prompt``; for ``vision``
        its model ids, and that the model reads images), so it is queued as it is."""
        self._check_open()
        params = params if params is not None else SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError("params must be a SamplingParams")
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise ValueError("cache_salt must be a string or None")  # hashed on the engine thread
        self.check_speculation(params)
        lora = self.adapter(adapter) if adapter is not None else None
        if lora is not None:  # its blocks are its own: never the base's, nor another adapter's
            cache_salt = adapter_salt(cache_salt, lora.digest)
        if checked:
            token_ids = list(prompt)
        else:
            token_ids = self.validate_prompt(prompt) if vision is None else self._validate_vision(vision)
        request_id = request_id or f"req-{next(_ids)}"
        stream = RequestStream(self, request_id)
        tok = self.loaded.tokenizer
        grammar = self.compile_grammar(params.structured) if params.structured is not None else None
        request = Request(
            request_id,
            token_ids,
            params,
            TextStream(streaming_detokenizer(tok), params.stop, params.include_stop_str_in_output),
            frozenset(tok.eos_token_ids),
            callback or stream.put,
            params.seed if params.seed is not None else random.getrandbits(63),
            grammar,
            cache_salt,
        )
        request.vision = vision
        request.adapter = lora
        with self._active_lock:
            self._active += 1
            self._last_activity = time.monotonic()
            self._arrivals += 1
            if self._arrived is None or params.priority < self._arrived:
                self._arrived = params.priority
        self._inbox.put(("add", request))
        return stream

    def compile_grammar(self, structured: dict):
        """The compiled grammar of a ``SamplingParams.structured`` value (cached per schema);
        ValueError when this model's tokenizer cannot serve it. ``submit`` calls it too: calling
        it first lets a caller refuse a request before accepting it."""
        return compiler_for(self.loaded.tokenizer, self.loaded.vocab_size).compile(structured)

    def abort(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id))

    def stats(self, held_blocks: bool = False) -> EngineStats:
        """The engine's figures now (any thread; see ``EngineStats``). ``held_blocks`` also
        counts the hot blocks that requests reference (a walk over the hot tier)."""
        return read_stats(self, held_blocks)

    def step_trace(self, last: Optional[int] = None) -> List[StepRecord]:
        """The records of the last ``config.step_trace`` steps (any thread; oldest first; with
        ``last`` only that many of the newest); empty when the trace is off."""
        trace = self._trace
        return [] if trace is None else trace.records(last)

    # -- the engine thread -------------------------------------------------------------------

    def _main(self, model_path) -> None:
        try:
            self.loaded = self._load_model(model_path)
            self.prefix_cache = self._make_prefix_cache()
            block_size = self.config.cache_block_size if self.prefix_cache.wants_kv else None
            self.scheduler = Scheduler(self.config, self._kv_capacity(), self.prefix_cache)
            self.runner = self._make_runner(block_size)
        except BaseException as exc:  # reported to the constructor's caller
            self._loaded(exc)
            return
        self._loaded()
        was_idle = True
        while True:
            idle = not self.scheduler.has_work()
            if idle:
                self.prefix_cache.engine_busy(False)
                if not was_idle:
                    # MLX and malloc keep freed memory for reuse; give it back when the work
                    # ends, so an idle server's memory is its weights and caches.
                    give_back_memory()
            was_idle = idle
            # Requests held by batch wait and nothing running: sleep until the first is due
            # or something arrives, instead of spinning.
            held = None if idle or self.scheduler.running else self.scheduler.next_release()
            if not self._drain_inbox(block=idle, timeout=held):
                break
            try:
                self._step()
            except Exception as exc:  # a failed step must not take the engine down
                logger.exception("engine step failed; failing the running requests")
                # The client is told no exception text (paths, prompts): the log has it.
                self._fail_all(f"internal error in the engine ({type(exc).__name__}; see the server's log)")
        self._fail_all("the engine was closed", reason="abort")
        self.runner = None
        self.prefix_cache.close()
        mx.synchronize()  # nothing may still run on this thread's stream once it is gone

    def _load_model(self, model_path) -> LoadedModel:
        return load_model(model_path, self.config.dtype, self.config.kv_quant)

    def _make_runner(self, block_size: Optional[int]) -> ModelRunner:
        speculation = SpeculationPolicy.of(self.config, self.scheduler.costs)
        return ModelRunner(self.loaded, block_size, self.clock, speculation)

    def _drain_inbox(self, block: bool, timeout: Optional[float] = None) -> bool:
        with self._active_lock:
            self._arrived, self._arrivals = None, 0  # what arrives from now on is news (_yields_to_arrival)
        while True:
            try:
                if timeout:
                    kind, item = self._inbox.get(timeout=timeout)
                else:
                    kind, item = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block, timeout = False, None
            if kind == "close":
                return False
            if kind == "add":
                self.scheduler.add(item)
                if (speculation := getattr(self.runner, "speculation", None)) is not None:
                    speculation.returns.arrived(item.created)
            elif kind == "call":
                self._answer(item)
            elif kind == "abort":
                request = self.scheduler.find(item)
                if request is not None:
                    self._finish(request, "abort")

    def _step(self) -> None:
        scheduled = time.perf_counter()
        out = self.scheduler.schedule()
        if len(out.prefill) > 1 and self.memory_critical.is_set():
            out.prefill = out.prefill[:1]  # the rest stay prefilling: the next steps take them up
        # The cold tier's disk writes wait while prompts are computed (up to a bounded delay):
        # from a step that prefills until one ends with no prompt left to compute.
        if out.prefill:
            self.prefix_cache.engine_busy(True)
        prefiller = self.runner.prefiller
        passes, computed = prefiller.forwards, prefiller.tokens
        trace = self._trace  # the step's one test of the trace: None when it is off
        if trace is not None:
            self.clock.reset()
            before = (self.runner.batch.passes, self.first_tokens, self.runner.batch.counters.verify_passes)
        start = time.perf_counter()
        try:
            self._run_step(out)
        finally:
            self.prefix_cache.engine_busy(bool(self.scheduler.prefilling or self.scheduler.waiting))
        seconds = time.perf_counter() - start
        prompt_tokens = sum(n for _, n in out.prefill)
        speculation = getattr(self.runner, "speculation", None)
        shadow = speculation.take_shadow_seconds() if speculation is not None else 0.0
        if not self.runner.batch.verified:  # a verify pass is not what a plain decode step costs
            padded = prefiller.tokens - computed
            self.scheduler.costs.observe(  # (nor are a draft model's shadow checks)
                out.num_decoding, prompt_tokens, seconds - shadow, prefiller.forwards - passes, padded
            )
        if trace is not None:
            trace.append(
                StepRecord(
                    step=self.steps,
                    start=start,
                    seconds=seconds,
                    schedule_seconds=start - scheduled,
                    decode_rows=out.num_decoding,
                    decode_passes=self.runner.batch.passes - before[0],
                    prefill_rows=len(out.prefill),
                    prompt_tokens=prompt_tokens,
                    padded_tokens=prefiller.tokens - computed,
                    prefill_passes=prefiller.forwards - passes,
                    first_tokens=self.first_tokens - before[1],
                    restores=len(out.prefix_hits),
                    restored_tokens=sum(hit.num_tokens for _, hit in out.prefix_hits),
                    prefill_seconds=out.prefill_seconds,
                    decode_seconds=out.decode_seconds,
                    verify=self.runner.batch.counters.verify_passes > before[2],
                    **self.clock.seconds(),
                )
            )

    def _run_step(self, out) -> None:
        self.steps += 1
        if self.steps % self.CLEAR_CACHE_STEPS == 0:
            # Under steady load nothing else gives memory back: MLX's buffer cache would keep the
            # largest batch's buffers, and glibc's arenas the pages freed by every thread (the
            # 10-minute soak measured 40 -> 134 MiB of free heap kept; tests/live/test_soak.py).
            give_back_memory()
        for request in out.preempted:
            self._keep_kv(request)  # so that recomputing it is mostly a cache hit
        self.runner.drop(out.preempted, give_back=True)
        if out.preempted and self.scheduler.hold:
            give_back_memory()  # preempted for memory: the freed KV goes back to the system now
        for request, reason, error in out.rejected:
            self._finish(request, reason, error)
        for request, hit in out.prefix_hits:
            start = time.perf_counter()
            self.runner.seed_cache(request, hit.layers, hit.num_tokens)
            self.prefix_cache.release(hit)
            seconds = time.perf_counter() - start
            request.restore_seconds += seconds
            self.clock.restore += seconds
        if out.prefill:
            start = time.perf_counter()
            done_before = {request: request.num_computed for request, _ in out.prefill}
            level = min(request.params.priority for request, _ in out.prefill)
            handled = set()

            def prompts_done(snapshots, done):
                """Prompts a pass finished: stored, and their first tokens sent, before the
                step's other passes run."""
                now = time.perf_counter()
                for request, _ in done:
                    handled.add(request)
                    request.prefill_seconds += now - start
                    if self.prefix_cache.wants_kv:
                        self._store_prompt(request, snapshots[request])
                self._first_tokens(done)

            costs = self.scheduler.costs
            stop = (lambda: self._yields_to_arrival(level)) if level > 0 else None  # background gives way
            snapshots = self.runner.prefill(
                out.prefill, prompts_done, stop, costs.piece_tokens() if stop else None, costs.pass_tokens()
            )
            # What was computed: less than asked for (or nothing) when a background prefill gave way.
            out.prefill = [
                (request, request.num_computed - done_before[request])
                for request, _ in out.prefill
                if request.num_computed > done_before[request]
            ]
            seconds = out.prefill_seconds = time.perf_counter() - start
            self.prefill_chunks += len(out.prefill)
            self.prefix_cache.observe_prefill(sum(n for _, n in out.prefill), seconds)
            for request, _ in out.prefill:
                if request not in handled:
                    request.prefill_seconds += seconds
                    self._store_whole_blocks(request, done_before[request], snapshots[request])
            if level > 0 and self._yields_to_arrival(level):
                out.num_decoding = 0
                return  # the newcomer is admitted next; this step's decode would only delay it
        # While background rows decode, the batch does not sample ahead: nothing is left running
        # when the step returns, so a more urgent arrival waits for one decode step, not two.
        start = time.perf_counter()
        batch = self.runner.batch
        ahead = not any(r.params.priority > 0 for r in batch.rows)
        rows, passes = len(batch), batch.passes
        if (speculation := getattr(self.runner, "speculation", None)) is not None:
            # Whose first token waits for this step: prompts with chunks left and what arrived
            # since the step began that the next step can admit (the policy weighs them against a
            # verify pass), and the next turns expected from the clients whose answers just ended
            # (``Returns``: the policy holds a dear pass for them).
            room = max(0, self.config.max_concurrent_requests - len(self.scheduler.running))
            speculation.expect(len(self.scheduler.prefilling), self._arrivals, room)
        ended, done = [], set()  # a speculative step returns several tokens a row: none after its end
        for request, token, logprob in self.runner.decode_step(ahead):
            if request not in done and (end := self._on_token(request, token, logprob)) is not None:
                ended.append(end)
                done.add(request)
        # The rows of this step's decode pass (with those whose prompts it finished); none when
        # the step only reported tokens: what the step costs (StepCosts.observe) is then prefill.
        out.num_decoding = rows if batch.passes > passes else 0
        self.runner.launch()  # on the CPU the step's pass is queued once the tokens before it are out
        out.decode_seconds = time.perf_counter() - start
        if ended:
            self._finish_all(ended)

    def _yields_to_arrival(self, level: int) -> bool:
        """Whether a request more urgent than ``level`` (a priority) was submitted since the
        step began: a background prefill then stops at its next piece and the next step admits
        the newcomer (it waits for about one decode step instead of a whole step of background
        prefill, ``max_step_ms``)."""
        arrived = self._arrived
        return arrived is not None and arrived < level

    def _first_tokens(self, done) -> None:
        """Sample and publish the first token of every request whose prompt this step's
        prefill finished, from the logits of its last prompt token, then move each into the
        decode batch (unless that token already ended it)."""
        ended = []
        speculation = getattr(self.runner, "speculation", None)
        for request, _ in done if speculation is not None else ():
            speculation.prepare(request)  # a draft model's KV of the prompt: the prompt's time
        sampled = self.runner.first_tokens(done)
        self.first_tokens += len(sampled)
        now = time.perf_counter()
        for request, token, logprob, state in sampled:
            if request.first_token_at is None:
                request.first_token_at = now
            self.scheduler.started_decoding(request)
            end = self._on_token(request, token, logprob)
            if end is None:
                began = time.perf_counter()
                self.runner.join(request, state)
                self.clock.merge += time.perf_counter() - began
            else:
                ended.append(end)
        if ended:
            self._finish_all(ended)

    def _on_token(self, request: Request, token: int, logprob):
        """Record a generated token and publish it; returns (request, reason, None, last
        event) when the token ends the request, for the caller to finish."""
        if request.status is not RequestStatus.DECODING:
            return None
        request.output_token_ids.append(token)
        reason = None
        text = ""
        if token in request.stop_token_ids:
            reason = "stop"
        else:
            text, stopped = request.text_stream.add(token)
            if stopped or (request.matcher is not None and request.matcher.finished):
                reason = "stop"
        if reason is None and request.length_left(self.loaded.context_length) <= 0:
            reason = "length"
        event = RequestOutput(request.request_id, text, [token], [logprob] if logprob else None)
        if reason is None:
            request.sink(event)
            return None
        return request, reason, None, event

    def _finish(self, request: Request, reason: str, error: Optional[str] = None) -> None:
        self._finish_all([(request, reason, error, None)])

    def _finish_all(self, ended: List[tuple]) -> None:
        """End requests, given as (request, reason, error, last event or None): keep their KV
        in the prefix cache, free it (one leave of the batch for all), send each its last event
        (with the text still held back)."""
        requests = [request for request, _, _, _ in ended]
        self._count(-len(requests))
        for request in requests:
            try:  # caching is best effort: a request always ends, or the loop fails it forever
                self._keep_kv(request)
            except Exception:
                logger.exception("could not keep the KV of %s in the prefix cache", request)
                request.snapshots = []
        self.runner.drop(requests, give_back=self.memory_critical.is_set())
        if (speculation := getattr(self.runner, "speculation", None)) is not None:
            # The clients of answers delivered whole may send their next turns at once.
            speculation.returns.ended(sum(reason in ("stop", "length") for _, reason, _, _ in ended))
        for request, reason, error, event in ended:
            if reason != "error" and self.runner.speculation is not None:
                self.runner.speculation.finished(request)  # (the engine thread: no lock)
            self.scheduler.finish(request)
            event = event or RequestOutput(request.request_id)
            if reason in ("stop", "length"):
                event.text += request.text_stream.flush()
            event.finish_reason = reason
            event.error = error
            event.usage = request.usage(time.perf_counter())
            request.sink(event)

    def _fail_all(self, error: str, reason: str = "error") -> None:
        for request in list(self.scheduler.waiting + self.scheduler.running):
            try:
                self._finish(request, reason, error)
            except Exception:
                logger.exception("while failing %s", request)
        self.runner.reset()
