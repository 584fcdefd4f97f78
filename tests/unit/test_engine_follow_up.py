"""The follow-up hold (issue 24): an answer that has just ended is a next turn about to arrive (an
agent in a closed loop), so a newcomer's long prompt waits for it, at most a decode step, and
both prompts are computed in one step instead of the arrival waiting for the newcomer's whole
step. Counts of steps and chunks with a stepping clock, never wall-clock times."""

import threading
import time

import numpy as np
import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.follow_ups import FollowUps
from tests.support.engine_control import hold

GREEDY = dict(temperature=0, ignore_eos=True)


def _ids(n, seed):
    return np.random.default_rng(seed).integers(10, 900, size=n).tolist()


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


def test_an_expected_arrival_is_forgotten_when_a_later_request_comes_or_its_window_ends():
    follow = FollowUps()
    before = time.perf_counter()  # a request submitted before the answers ended
    assert follow.expected(10.0, 0.5) == 0 and follow.due(10.0, 0.5) is None
    follow.answer_ended(10.0)
    follow.answer_ended(10.2)
    assert follow.expected(10.3, 0.5) == 2
    assert follow.due(10.3, 0.5) == pytest.approx(0.4)  # the later one is given up at 10.7
    follow.arrived(before)  # sent before they ended: not a next turn of theirs
    assert follow.expected(10.3, 0.5) == 2
    follow.arrived(time.perf_counter())  # the oldest is here
    assert follow.expected(10.3, 0.5) == 1
    assert follow.expected(10.7, 0.5) == 0  # its window is over: not coming
    follow.arrived(time.perf_counter())  # an arrival with nothing expected changes nothing
    assert follow.expected(10.7, 0.5) == 0


class Steps:
    """Records every step's prefill chunks [(request id, tokens)] (an empty list for a step
    without prefill) and every step's decode rows."""

    def __init__(self, engine):
        self.prefill, self.decodes = [], 0
        engine.call(self._install)

    def _install(self, engine):
        prefill, decode = engine.runner.prefill, engine.runner.decode_step

        def recording(chunks, *args, **kwargs):
            self.prefill.append([(r.request_id, n) for r, n in chunks])
            return prefill(chunks, *args, **kwargs)

        def decoding(*args):
            if engine.runner.batch.rows:
                self.decodes += 1
            return decode(*args)

        engine.runner.prefill, engine.runner.decode_step = recording, decoding

    def step_of(self, name):
        return [i for i, step in enumerate(self.prefill) for rid, _ in step if rid == name]


def _waiting(llm):
    return llm.engine.call(lambda e: [r.request_id for r in e.scheduler.waiting])


def _steps(llm, n):
    """Let the engine run ``n`` more loop turns (a call is answered between two steps)."""
    for _ in range(n):
        llm.engine.call(lambda e: None)


def _measured(llm):
    """A request with a few decode steps, then one with a prompt next to a stream: the decode
    step, a pass and a prompt token are measured (the hold needs all three)."""
    llm.generate([_ids(20, 5)], SamplingParams(max_tokens=6, **GREEDY))
    done = threading.Event()
    llm.engine.submit(
        _ids(20, 6), SamplingParams(max_tokens=40, **GREEDY), callback=lambda e: e.finished and done.set()
    )
    llm.generate([_ids(200, 7)], SamplingParams(max_tokens=2, **GREEDY))
    assert done.wait(60)
    costs = llm.engine.call(lambda e: e.scheduler.costs)
    assert costs.follow_up_window() is not None


def _answers_end_together(llm, n):
    """A long stream "b" decodes; ``n`` short answers start in one step and end in one step next
    to it (their clients would send their next turns at once). Returns b's end event."""
    b_done = threading.Event()
    llm.engine.submit(
        _ids(20, 2),
        SamplingParams(max_tokens=300, **GREEDY),
        request_id="b",
        callback=lambda e: e.finished and b_done.set(),
    )
    answers = [threading.Event() for _ in range(n)]
    release = hold(llm.engine)
    for i, done in enumerate(answers):
        llm.engine.submit(
            _ids(20, 100 + i),
            SamplingParams(max_tokens=3, **GREEDY),
            callback=lambda e, d=done: e.finished and d.set(),
        )
    release.set()
    assert all(done.wait(60) for done in answers)
    return b_done


def _submit(llm, name, seed, priority=0):
    done = threading.Event()
    llm.engine.submit(
        _ids(300, seed),
        SamplingParams(max_tokens=2, priority=priority, **GREEDY),
        request_id=name,
        callback=lambda e: e.finished and done.set(),
    )
    return done


def test_the_first_next_turn_waits_for_the_second_and_both_prompts_share_a_step(path):
    """Two answers end in one step; the first next turn (a 300-token prompt) is held while the
    second is due, the stream decoding meanwhile; the second comes and both prompts are computed
    in one step, where without the hold the second would wait for the first's whole step."""
    with LLM(path, prefix_cache=False) as llm:
        _measured(llm)
        now = [1000.0]  # the stepping clock: a hold ends only by an arrival while it stands still
        llm.engine.call(lambda e: setattr(e.scheduler, "clock", lambda: now[0]))
        rec = Steps(llm.engine)
        b_done = _answers_end_together(llm, 2)
        first = _submit(llm, "first", 9)
        assert _waiting(llm) == ["first"]
        decodes = rec.decodes
        _steps(llm, 5)
        assert rec.decodes >= decodes + 5  # the stream went on meanwhile: the hold costs it nothing
        assert _waiting(llm) == ["first"] and rec.step_of("first") == [] and not first.is_set()
        second = _submit(llm, "second", 10)
        assert first.wait(60) and second.wait(60)
        llm.engine.abort("b")
        assert b_done.wait(60)
        holds = llm.engine.call(lambda e: e.scheduler.follow_ups.holds)
    assert rec.step_of("first") == rec.step_of("second") and len(rec.step_of("first")) == 1
    assert holds > 0


def test_the_hold_ends_after_a_decode_step_and_never_holds_an_urgent_request(path):
    """Three answers end in one step. An urgent newcomer is not held; a default-priority one is,
    while two next turns are due, until the clock has moved a decode step: then it goes alone."""
    with LLM(path, prefix_cache=False) as llm:
        _measured(llm)
        now = [1000.0]
        llm.engine.call(lambda e: setattr(e.scheduler, "clock", lambda: now[0]))
        rec = Steps(llm.engine)
        b_done = _answers_end_together(llm, 3)
        assert _submit(llm, "urgent", 11, priority=-1).wait(60)  # while the clock stands still
        x = _submit(llm, "x", 12)
        _steps(llm, 5)
        assert _waiting(llm) == ["x"] and not x.is_set()
        window = llm.engine.call(lambda e: e.scheduler.costs.follow_up_window())
        now[0] += window  # the next turns did not come within a decode step: not waited for further
        assert x.wait(60)
        llm.engine.abort("b")
        assert b_done.wait(60)
    assert len(rec.step_of("x")) == 1 and len(rec.step_of("urgent")) == 1
