"""Step composition: while streams decode, a default-priority prompt is computed whole (one
long prompt a step: tests/unit/test_engine_prompts_apart.py);
with ``max_step_ms``, and for background prompts, a step computes only the prompt tokens that
keep it near the target (from speeds measured while serving), at least
``StepCosts.MIN_PREFILL_TOKENS``; urgent prefills take the step's budget first; the setting
changes while the engine runs. Counts of tokens per step, never wall-clock assertions."""

import threading

import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.step_costs import StepCosts
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)
MIN = StepCosts.MIN_PREFILL_TOKENS


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


def test_costs_model_a_step_as_decode_plus_prefill():
    costs = StepCosts()
    assert costs.prefill_allowance(200) is None  # nothing measured: no bound
    costs.observe(0, 1000, 0.5)  # a prefill alone: 2,000 tokens/s
    costs.observe(4, 0, 0.1)  # a decode step of 4 rows
    assert costs.prefill_rate == 2000 and costs.decode_seconds == 0.1
    costs.observe(4, 300, 0.25)  # with decode rows: 300 tokens in 0.15 s on top of the decode
    assert costs.prefill_rate == pytest.approx(0.75 * 2000 + 0.25 * 2000)
    assert costs.prefill_allowance(200) == 200  # (0.2 - 0.1) s x 2,000 tokens/s
    assert costs.prefill_allowance(0) == 600  # auto: 4 decode steps = 0.4 s
    assert costs.prefill_allowance(50) == MIN  # tighter than a decode step: still progresses
    costs.observe(4, 0, 0.3)
    assert costs.decode_seconds == pytest.approx(0.75 * 0.1 + 0.25 * 0.3)


def test_a_pass_is_priced_from_small_decode_steps_and_tokens_from_prefill_steps():
    costs = StepCosts()
    assert costs.pass_tokens() == StepCosts.DEFAULT_PIECE  # nothing measured
    costs.observe(1, 0, 0.3)  # one row: a pass, about
    assert costs.pass_seconds == 0.3 and costs.pass_tokens() == StepCosts.DEFAULT_PIECE
    costs.observe(0, 400, 5.3, passes=1, computed=500)  # 100 of the 500 tokens were padding
    assert costs.token_seconds == pytest.approx(5.0 / 500)
    assert costs.pass_tokens() == 30
    costs.observe(32, 0, 0.9)  # a large batch: its rows overlap the weights, it says nothing
    assert costs.pass_seconds == 0.3
    costs.observe(2, 0, 0.4)  # two rows: less their tokens
    assert costs.pass_seconds == pytest.approx(0.75 * 0.3 + 0.25 * (0.4 - 2 * 0.01))
    costs.observe(0, 0, 0.05)  # a step that ran no pass (it only reported tokens): ignored
    assert costs.pass_seconds == pytest.approx(0.75 * 0.3 + 0.25 * 0.38)
    costs.observe(4, 100, 2.0, passes=2, computed=100)  # prefill next to decode: less both
    assert costs.token_seconds == pytest.approx(
        0.75 * 0.01 + 0.25 * (2.0 - costs.decode_seconds - 2 * costs.pass_seconds) / 100
    )


def costs_of(pass_seconds: float, token_seconds: float, decode_seconds: float, sizes) -> StepCosts:
    """StepCosts after a few one-row decode steps and prefill steps of ``sizes`` tokens (one
    pass each) on a machine where a pass costs ``pass_seconds`` plus ``token_seconds`` a token."""
    costs = StepCosts()
    for _ in range(4):
        costs.observe(1, 0, decode_seconds)
    for n in sizes:
        costs.observe(0, n, pass_seconds + token_seconds * n, passes=1, computed=n)
    return costs


# Prefills as bench_engine.py runs them: a 512-token prompt, then the 32-token prompts of streams.
SIZES = [512, 32, 32, 32, 32, 32]


def test_a_prompt_token_is_priced_by_the_slope_of_prefill_steps_where_a_pass_dominates():
    """A GPU (the H200 of docs/benchmarks.md, "CUDA"): a prefill pass ~30 ms whatever it
    computes, 10 us a token, a pipelined decode step 8 ms. ``token_seconds`` (a step less a
    decode-priced pass) says 0.5 ms a token; the slope of the steps says 10 us."""
    costs = costs_of(0.030, 1e-5, 0.008, SIZES)
    assert costs.token_seconds > 30 * 1e-5
    assert costs.prompt_token_seconds() == pytest.approx(1e-5)


def test_on_a_cpu_the_slope_and_the_per_token_estimate_agree():
    """A CPU: a pass 50 ms (the weights read once), 1 ms a token, a decode step 60 ms."""
    costs = costs_of(0.050, 1e-3, 0.060, SIZES)
    assert costs.prompt_token_seconds() == pytest.approx(1e-3)
    assert costs.token_seconds == pytest.approx(1e-3, rel=0.25)  # (its pass priced at a decode step)


def test_without_a_spread_of_sizes_the_per_token_estimate_stands():
    costs = costs_of(0.030, 1e-5, 0.008, [32] * 6)
    assert costs.prompt_token_seconds() == costs.token_seconds
    noisy = costs_of(0.030, 1e-5, 0.008, [])
    for n, seconds in [(512, 0.036), (32, 0.055), (2048, 0.045), (32, 0.050)]:  # the H200's own
        noisy.observe(0, n, seconds, passes=1, computed=n)
    assert noisy.prompt_token_seconds() == 0.0  # the tokens cost less than the passes vary


class Chunks:
    """Records the (request id, tokens) of every prefill chunk, step by step."""

    def __init__(self, engine, on_chunk=None):
        self.steps = []
        self.on_chunk = on_chunk
        engine.call(self._install)

    def _install(self, engine):
        prefill = engine.runner.prefill

        def recording(chunks, *args, **kwargs):
            self.steps.append([(r.request_id, n) for r, n in chunks])
            if self.on_chunk:
                self.on_chunk(engine, self.steps)
            return prefill(chunks, *args, **kwargs)

        engine.runner.prefill = recording

    def of(self, name):
        return [n for step in self.steps for rid, n in step if rid == name]


def _long_prompt_while_streams_decode(llm):
    """Two streams decode; once both have several tokens, a 300-token prompt arrives. Returns the
    chunk recorder, the requests still decoding when the long one ended, and its last event."""
    engine = llm.engine
    chunks = Chunks(engine)
    tokens = {"a": threading.Event(), "b": threading.Event()}
    seen = {"a": 0, "b": 0}
    done = threading.Event()
    final = {}

    def long_done(event):
        if event.finished:
            final["event"] = event
            done.set()

    def stream(name):
        def on_event(event):
            seen[name] += len(event.token_ids)
            if seen[name] >= 4:
                tokens[name].set()

        return on_event

    for name in ("a", "b"):
        engine.submit(
            random_ids(20, ord(name)),
            SamplingParams(max_tokens=400, **GREEDY),
            request_id=name,
            callback=stream(name),
        )
    assert all(t.wait(60) for t in tokens.values())
    engine.submit(
        random_ids(300, 9), SamplingParams(max_tokens=2, **GREEDY), request_id="long", callback=long_done
    )
    assert done.wait(120)
    still = llm.engine.call(lambda e: [r.request_id for r in e.scheduler.decoding])
    for name in ("a", "b"):
        engine.abort(name)
    return chunks, still, final["event"]


def test_a_tight_target_spreads_a_long_prompt_over_small_chunks(path):
    with LLM(path, prefix_cache=False, max_step_ms=0.001) as llm:
        chunks, still, _ = _long_prompt_while_streams_decode(llm)
        costs = llm.engine.call(lambda e: e.scheduler.costs.snapshot())
        row = llm.engine.stats().decode_row_tokens  # what the router of Redis mode weighs
    assert row is not None and row > 0
    assert set(still) == {"a", "b"}  # the streams decoded all along
    assert chunks.of("long") == [MIN] * 9 + [300 - 9 * MIN]
    assert costs["decode_step_seconds"] > 0 and costs["prefill_tokens_per_second"] > 0


def test_a_loose_target_prefills_in_one_chunk_and_tune_changes_it_live(path):
    with LLM(path, prefix_cache=False, max_step_ms=600_000) as llm:
        chunks, _, _ = _long_prompt_while_streams_decode(llm)
        assert chunks.of("long") == [300]
        config = llm.engine.tune(max_step_ms=0.001)
        assert config.max_step_ms == 0.001 and llm.engine.config.max_step_ms == 0.001
        with pytest.raises(ValueError, match="prefill_chunk_size"):
            llm.engine.tune(prefill_chunk_size=8)
        with pytest.raises(ValueError, match="max_step_ms"):
            llm.engine.tune(max_step_ms=-1)
        chunks, _, _ = _long_prompt_while_streams_decode(llm)
        assert chunks.of("long") == [MIN] * 9 + [300 - 9 * MIN]


def test_urgent_prefills_take_the_step_budget_first(path):
    """A background prompt is prefilling when an interactive one arrives: the interactive one
    takes every step's budget until its prompt is done, then the background one goes on."""

    def submit_interactive(engine, steps):
        if len(steps) == 1:  # the background prompt's first chunk: it is now prefilling
            engine.submit(
                random_ids(100, 2),
                SamplingParams(max_tokens=1, priority=0, **GREEDY),
                request_id="interactive",
                callback=lambda e: e.finished and done.set(),
            )

    done = threading.Event()
    with LLM(
        path, prefix_cache=False, max_concurrent_requests=2, step_token_budget=20, prefill_chunk_size=16
    ) as llm:
        chunks = Chunks(llm.engine, submit_interactive)
        background = llm.engine.submit(
            random_ids(100, 1), SamplingParams(max_tokens=1, priority=10, **GREEDY), request_id="background"
        )
        assert done.wait(60)
        list(background)
    # Admitted the step after the background prompt's first chunk, it takes the budget, and the
    # less urgent background prompt waits until it is done.
    assert chunks.steps[0] == [("background", 16)]
    assert chunks.steps[1:8] == [[("interactive", 16)]] * 6 + [[("interactive", 4)]]
    assert chunks.steps[8] == [("background", 16)]
    assert chunks.of("background") == [16] * 6 + [4]


def _measure_costs(llm):
    """One request with a few decode steps, so both speeds are known; returns when it ended."""
    llm.generate([random_ids(20, 5)], SamplingParams(max_tokens=6, **GREEDY))
    costs = llm.engine.call(lambda e: e.scheduler.costs.snapshot())
    assert costs["decode_step_seconds"] and costs["prefill_tokens_per_second"]


def test_background_prefill_keeps_to_the_target_even_with_nothing_decoding(path):
    """Nothing decodes: a background prompt (priority > 0) still prefills in bounded steps, so an
    interactive request arriving meanwhile waits about one short step; a default-priority prompt
    takes the whole budget."""
    with LLM(path, prefix_cache=False, max_step_ms=0.001) as llm:
        _measure_costs(llm)
        chunks = Chunks(llm.engine)
        background, interactive = llm.generate(
            [random_ids(100, 6), random_ids(100, 7)],
            [SamplingParams(max_tokens=1, priority=5, **GREEDY), SamplingParams(max_tokens=1, **GREEDY)],
        )
    ids = [s[0][0] for s in chunks.steps]
    assert chunks.of(interactive.request_id) == [100]  # first, in one chunk: nothing to protect
    assert chunks.of(background.request_id) == [MIN] * 3 + [100 - 3 * MIN]
    assert ids[0] == interactive.request_id


def test_an_urgent_prompt_is_not_held_back_by_background_streams(path):
    """Only background streams decode: the bound protects streams at least as urgent as the
    prompt, so an interactive prompt is prefilled in one chunk; a background one in small ones."""
    with LLM(path, prefix_cache=False, max_step_ms=0.001) as llm:
        engine = llm.engine
        _measure_costs(llm)
        started = threading.Event()
        seen = [0]

        def on_event(event):
            seen[0] += len(event.token_ids)
            if seen[0] >= 3:
                started.set()

        engine.submit(
            random_ids(20, 8),
            SamplingParams(max_tokens=400, priority=5, **GREEDY),
            request_id="stream",
            callback=on_event,
        )
        assert started.wait(60)
        chunks = Chunks(engine)
        llm.generate([random_ids(200, 9)], SamplingParams(max_tokens=1, priority=0, **GREEDY))
        llm.generate([random_ids(200, 10)], SamplingParams(max_tokens=1, priority=5, **GREEDY))
        still = engine.call(lambda e: [r.request_id for r in e.scheduler.decoding])
        engine.abort("stream")
    assert "stream" in still
    urgent, background = [s for s in chunks.steps if s][0][0][0], [s for s in chunks.steps if s][-1][0][0]
    assert chunks.of(urgent) == [200]
    assert chunks.of(background) == [MIN] * 6 + [200 - 6 * MIN]


def test_by_default_a_prompt_next_to_long_streams_is_computed_in_one_step(path):
    """The default step composition (no ``max_step_ms``): two streams with hundreds of tokens
    left, a 300-token prompt arrives: one chunk, one step, not spread over the streams' steps
    (issue 24: spreading it stretched every step and gained no one time to the last token)."""
    with LLM(path, prefix_cache=False) as llm:
        for _ in range(2):  # a pass is priced from decode steps, a token from prefills after that
            _measure_costs(llm)
        costs = llm.engine.call(lambda e: e.scheduler.costs.snapshot())
        assert costs["pass_seconds"] and costs["token_seconds"]
        chunks, still, _ = _long_prompt_while_streams_decode(llm)
    assert set(still) == {"a", "b"}
    assert chunks.of("long") == [300]
