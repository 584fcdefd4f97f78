"""Clients coming back (issue 27 under an agent's closed loop): after an answer's end, until its
client's next turn comes or a short window ends, and while clients come back that way, a verify
pass that costs more than a plain step is held, so that the turn does not wait for it. Time is
the tests' own clock (``Returns.clock``); the engine test runs a real engine."""

import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.speculative import SpeculationPolicy
from inference.engine.speculative.returns import Returns
from inference.engine.step_costs import StepCosts
from tests.support.token_ids import looping_rows


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def returns() -> tuple:
    clock = Clock()
    return clock, Returns(clock)


def test_no_client_is_expected_back_before_one_came_back():
    clock, r = returns()
    r.ended(2)
    assert r.expected() == 0.0  # no evidence yet that clients come back at once
    assert (r.returned, r.lapsed, r.pending) == (0, 0, 2)


def test_returns_within_the_window_raise_the_expectation_and_lapses_lower_it():
    clock, r = returns()
    for _ in range(10):  # ten answers, each client back 8 ms later
        r.ended()
        clock.now += 0.008
        r.arrived(clock.now)
        clock.now += 0.5
    assert (r.returned, r.lapsed, r.pending) == (10, 0, 0)
    rate = 1 - (1 - Returns.ALPHA) ** 10
    assert r.rate == pytest.approx(rate)
    r.ended(2)  # two answers end together: two returns expected
    assert r.expected() == pytest.approx(2 * rate)
    clock.now += 0.008
    r.arrived(clock.now)  # one client is back
    rate += Returns.ALPHA * (1 - rate)
    assert r.expected() == pytest.approx(rate) and (r.returned, r.pending) == (11, 1)
    clock.now += Returns.WINDOW  # the other does not come back in time
    assert r.expected() == 0.0
    assert (r.returned, r.lapsed, r.pending) == (11, 1, 0)
    assert r.rate == pytest.approx(rate * (1 - Returns.ALPHA))  # the lapse brought it down


def test_a_return_taken_in_after_a_long_step_counts_by_when_it_was_submitted():
    """The engine takes requests in between steps: a turn its client sent 8 ms after the
    answer's end may be taken in 80 ms later, after another prompt's step. It is a return, and
    until it is taken in (``unmatched``) the end it returns to does not lapse."""
    clock, r = returns()
    r.rate = 0.9  # (clients came back before)
    r.ended()
    sent = clock.now + 0.008
    clock.now += 0.080
    # Its window is closed: no return expected any more, but the end does not lapse yet.
    assert r.expected(unmatched=1) == 0.0 and (r.lapsed, r.pending) == (0, 1)
    r.arrived(sent)
    assert (r.returned, r.lapsed) == (1, 0)
    r.ended()
    clock.now += 0.080
    r.arrived(clock.now)  # sent 80 ms after the end: too late
    assert (r.returned, r.lapsed) == (1, 1)


def test_an_arrival_with_no_answer_before_it_is_not_a_return():
    clock, r = returns()
    r.arrived(clock.now)  # a new conversation
    r.ended()
    r.arrived(clock.now - 0.001)  # submitted before the answer ended (taken in after it)
    assert (r.returned, r.pending) == (0, 1)
    clock.now += Returns.WINDOW * 2
    r.arrived(clock.now)  # too late to be its client's return
    assert (r.returned, r.lapsed, r.rate) == (0, 1, 0.0)


def priced(clock, verify: float = 0.040) -> tuple:
    """(policy, rows): two looping lookup rows of a policy whose plain step of two rows costs
    20 ms and whose verify pass costs ``verify``, with clients that came back after each of ten
    answers (the last a second ago)."""
    costs = StepCosts()
    for _ in range(8):
        costs.observe(2, 0, 0.020)
    policy = SpeculationPolicy("lookup", 4, costs)
    policy.returns = Returns(clock)
    rows = looping_rows(2)
    assert policy.wanted(rows, None) and policy.ready(rows, None, [False, False])
    policy.observe(rows, policy.drafts(rows, None), [4, 4], verify)
    for _ in range(10):
        policy.returns.ended()
        policy.returns.arrived(clock.now)
    clock.now += 1.0
    return policy, rows


def test_an_answer_ended_holds_a_dear_pass_until_its_client_is_back():
    clock = Clock()
    policy, rows = priced(clock)  # a pass of two plain steps
    policy.expect(prompts=0, arrivals=0, room=4)
    assert policy.coming == 0.0 and policy.ready(rows, None, [False, False])
    policy.returns.ended()  # an answer ended: its client is on its way back
    policy.expect(prompts=0, arrivals=0, room=4)
    assert policy.waiting == 0 and policy.coming == pytest.approx(policy.returns.rate)
    assert policy.coming > 0.85
    assert not policy.ready(rows, None, [False, False]) and policy.return_holds == 1
    assert all(r.speculation.active for r in rows)  # they draft again after it
    policy.expect(prompts=0, arrivals=0, room=0)  # no room to admit the turn: it would wait anyway
    assert policy.coming == 0.0 and policy.ready(rows, None, [False, False])
    clock.now += 0.008
    policy.expect(prompts=0, arrivals=1, room=4)  # submitted during the step, not taken in yet
    assert policy.waiting == 1 and policy.coming > 0.85  # (it waits for this step all the same)
    assert not policy.ready(rows, None, [False, False])
    assert policy.return_holds + policy.prompt_holds == 2
    policy.returns.arrived(clock.now)  # taken in: nothing more on its way
    policy.expect(prompts=0, arrivals=0, room=3)
    assert policy.coming == 0.0 and policy.ready(rows, None, [False, False])
    policy.returns.ended()
    clock.now += Returns.WINDOW + 0.001  # another client does not come back in time
    policy.expect(prompts=0, arrivals=0, room=3)
    assert policy.coming == 0.0 and policy.ready(rows, None, [False, False])
    assert policy.returns.lapsed == 1


def test_a_pass_about_a_plain_step_runs_while_a_client_is_coming_back():
    """On a GPU a verify pass costs about a plain step: the turn would not wait longer for it."""
    clock = Clock()
    policy, rows = priced(clock, verify=0.022)
    policy.returns.ended()
    policy.expect(prompts=0, arrivals=0, room=4)
    assert policy.coming > 0.85 and policy.ready(rows, None, [False, False])
    assert policy.return_holds == 0


def test_nothing_is_held_before_a_pass_is_priced():
    """The hold is a guess at an arrival: not taken at a price not yet measured (the first
    passes measure it), nor without a cost rule."""
    for costs in (None, StepCosts()):
        if costs is not None:
            costs.observe(2, 0, 0.020)  # a plain step priced, no verify pass yet
        clock = Clock()
        policy = SpeculationPolicy("lookup", 4, costs)
        policy.returns = Returns(clock)
        for _ in range(10):
            policy.returns.ended()
            policy.returns.arrived(clock.now)
        rows = looping_rows(2)
        assert policy.wanted(rows, None)
        policy.returns.ended()
        policy.expect(prompts=0, arrivals=0, room=4)
        assert policy.coming > 0.85 and policy.ready(rows, None, [False, False])
        assert policy.return_holds == 0


def test_clients_that_do_not_come_back_at_once_hold_nothing():
    clock = Clock()
    policy, rows = priced(clock)
    for _ in range(10):  # ten answers whose clients took their time (a person reading)
        policy.returns.ended()
        clock.now += 5.0
        policy.returns.arrived(clock.now)
    assert policy.returns.rate < 0.15
    policy.returns.ended()
    policy.expect(prompts=0, arrivals=0, room=4)
    assert policy.coming < 0.5 and policy.ready(rows, None, [False, False])
    assert policy.return_holds == 0


@pytest.fixture(scope="module")
def llm(model_dir):
    with LLM(model_dir(arch="llama", preset="tiny"), max_concurrent_requests=4) as llm:
        yield llm


def test_the_engine_counts_answers_ended_and_the_arrivals_after_them(llm):
    """A real engine: an answer delivered whole is an end, the next submitted request its
    return; an aborted request is no end. (The window is an hour here, so that a slow machine
    cannot make the return lapse.)"""
    engine = llm.engine
    r = Returns()
    r.WINDOW = 3600.0
    engine.call(lambda e: setattr(e.runner.speculation, "returns", r))
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, speculative="lookup")
    llm.generate([[5, 6, 7, 5, 6, 7]], [params])
    assert r.pending == 1 and r.returned == 0
    llm.generate([[5, 6, 7, 5, 6, 7, 8]], [params])  # the client's next turn
    assert r.returned == 1 and r.pending == 1  # and its own answer ended
    stream = engine.submit([1, 2, 3], SamplingParams(max_tokens=1000, ignore_eos=True))
    stream.abort()
    for _ in stream:
        pass
    assert r.returned == 2 and r.pending == 0  # the abort ended no answer
