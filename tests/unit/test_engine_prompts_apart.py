"""Prompts apart (issue 24): prompts that arrive together are computed one a step, each whole in
its own step, with a decode step between two of them while streams decode, so their answers end
apart and an agent's next turns do not arrive behind each other's prompts. Counts of steps and
chunks, never wall-clock times."""

import threading

import pytest

from cache.prefix_cache import PrefixCache
from inference.engine import LLM, EngineConfig, SamplingParams
from inference.engine.request import Request
from inference.engine.scheduler import Scheduler
from tests.support.engine_control import hold
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


class Steps:
    """Records the engine step of every prefill call with its chunks [(request id, tokens)],
    and the rows of every decode step."""

    def __init__(self, engine):
        self.prefill, self.decodes = [], []
        engine.call(self._install)

    def _install(self, engine):
        prefill, decode = engine.runner.prefill, engine.runner.decode_step

        def recording(chunks, *args, **kwargs):
            self.prefill.append((engine.steps, [(r.request_id, n) for r, n in chunks]))
            return prefill(chunks, *args, **kwargs)

        def decoding(*args):
            self.decodes.append((engine.steps, len(engine.runner.batch.rows)))
            return decode(*args)

        engine.runner.prefill, engine.runner.decode_step = recording, decoding

    def chunks_of(self, name):
        """(step, tokens) of each chunk of request ``name``."""
        return [(step, n) for step, chunks in self.prefill for rid, n in chunks if rid == name]


def _measured(llm):
    """A request with a few decode steps, then one with a prompt next to a stream: the decode
    step, a pass and a prompt token are measured (the rule needs all three)."""
    llm.generate([random_ids(20, 5)], SamplingParams(max_tokens=6, **GREEDY))
    done = threading.Event()
    llm.engine.submit(
        random_ids(20, 6),
        SamplingParams(max_tokens=40, **GREEDY),
        callback=lambda e: e.finished and done.set(),
    )
    llm.generate([random_ids(200, 7)], SamplingParams(max_tokens=2, **GREEDY))
    assert done.wait(60)
    assert llm.engine.call(lambda e: e.scheduler.costs.measured())


def _together(llm, names, stream=None):
    """Submit a 300-token prompt for each of ``names`` so that the scheduler sees them in one
    step (and a long stream ``stream`` before them, if given); wait for them to end."""
    done = {name: threading.Event() for name in names}
    b_done = threading.Event()
    if stream is not None:
        llm.engine.submit(
            random_ids(20, 2),
            SamplingParams(max_tokens=300, **GREEDY),
            request_id=stream,
            callback=lambda e: e.finished and b_done.set(),
        )
        llm.engine.call(lambda e: None)  # it decodes before the prompts arrive
    release = hold(llm.engine)
    for i, name in enumerate(names):
        llm.engine.submit(
            random_ids(300, 10 + i),
            SamplingParams(max_tokens=4, **GREEDY),
            request_id=name,
            callback=lambda e, d=done[name]: e.finished and d.set(),
        )
    release.set()
    assert all(d.wait(60) for d in done.values())
    if stream is not None:
        llm.engine.abort(stream)
        assert b_done.wait(60)


def test_prompts_that_arrive_together_next_to_a_stream_run_whole_in_steps_apart(path):
    """Three 300-token prompts arrive in one step while a stream decodes: each is computed whole
    in a step of its own, in arrival order (whole even while the rows before it are about to
    end: 4 tokens each), with a step between two of them that computes no prompt and decodes
    the stream (and the prompts already done)."""
    with LLM(path, prefix_cache=False) as llm:
        _measured(llm)
        rec = Steps(llm.engine)
        _together(llm, ["x", "y", "z"], stream="b")
    chunks = [rec.chunks_of(name) for name in ("x", "y", "z")]
    assert [[n for _, n in c] for c in chunks] == [[300], [300], [300]]  # each whole, in one step
    steps = [c[0][0] for c in chunks]
    assert steps[0] < steps[1] < steps[2]
    for a, b in zip(steps, steps[1:]):
        assert b - a >= 2  # a step between
        between = [rows for step, rows in rec.decodes if a < step < b]
        assert between and all(rows >= 2 for rows in between)  # it decoded the stream and the prompt before


def test_with_nothing_decoding_the_prompts_still_run_one_a_step(path):
    """Two prompts arrive together with nothing decoding: the first runs alone, then a decode
    step of its stream, then the second."""
    with LLM(path, prefix_cache=False) as llm:
        _measured(llm)
        rec = Steps(llm.engine)
        _together(llm, ["x", "y"])
    (x_step, x_n), (y_step, y_n) = rec.chunks_of("x") + rec.chunks_of("y")
    assert (x_n, y_n) == (300, 300) and y_step - x_step >= 2
    assert [rows for step, rows in rec.decodes if x_step < step < y_step][0] == 1


def test_before_the_costs_are_known_prompts_that_arrive_together_share_a_step(path):
    """The rule weighs a prompt by measured costs: before any is measured, both prompts are
    computed in the first step."""
    with LLM(path, prefix_cache=False) as llm:
        rec = Steps(llm.engine)
        _together(llm, ["x", "y"])
    assert [step for step, _ in rec.chunks_of("x")] == [step for step, _ in rec.chunks_of("y")]


@pytest.mark.parametrize(
    "machine, together",
    [
        # (pass s, token s, decode step s): a GPU's passes cost ~30 ms whatever they compute
        # (docs/benchmarks.md, "CUDA"): 32 prompts together add ~10 ms to one pass, apart they
        # took 64 steps (a burst's last first token 1.6 s after it arrived, mlx-lm's 0.1 s)
        ((0.030, 1e-5, 0.008), True),
        # a CPU's tokens cost more than a decode step's worth: one a step, with decode steps between
        ((0.050, 1e-3, 0.060), False),
    ],
    ids=["gpu", "cpu"],
)
def test_a_burst_of_short_prompts_is_computed_together_where_tokens_cost_little(machine, together):
    from tests.unit.test_engine_step_time import SIZES, costs_of

    config = EngineConfig(max_concurrent_requests=64, step_token_budget=8192)  # room for all 32
    scheduler = Scheduler(config, 10**6, PrefixCache())
    scheduler.costs = costs_of(*machine, SIZES)
    params = SamplingParams(max_tokens=2, **GREEDY)
    stream = Request("stream", random_ids(32, 1), params, None, frozenset(), None, 0)
    scheduler.add(stream)
    scheduler.schedule()
    stream.num_computed = stream.num_tokens
    scheduler.started_decoding(stream)
    burst = [Request(f"b{i}", random_ids(100, 2 + i), params, None, frozenset(), None, 0) for i in range(32)]
    for r in burst:
        scheduler.add(r)
    first = scheduler.schedule()
    assert len(first.prefill) == (32 if together else 1)
