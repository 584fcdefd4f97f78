"""What the adaptive rule prices a verify pass against (issue 27 under an agent load): a plain
decode step of the batch's own size, from recent plain steps (``StepCosts.plain_step_seconds``),
not an average that one slow step or another batch size moved; and a run of verify passes
stops for plain steps that measure that price again. Counted in decisions, never timed: the
step times are given to the real ``StepCosts`` as an engine would observe them."""

import pytest

from inference.engine.speculative import SpeculationPolicy
from inference.engine.step_costs import StepCosts
from tests.support.token_ids import looping_rows


def test_a_plain_step_is_priced_by_recent_steps_of_the_same_batch_size():
    costs = StepCosts()
    for _ in range(8):
        costs.observe(4, 0, 0.020)  # four rows: 20 ms a plain step
        costs.observe(1, 0, 0.005)  # one row: 5 ms
    for _ in range(2):
        costs.observe(4, 0, 0.118)  # two slow steps (a loaded machine)
    assert costs.plain_steps == 18
    assert costs.plain_step_seconds(4) == pytest.approx(0.020)  # the median of the last eight
    assert costs.plain_step_seconds(1) == pytest.approx(0.005)
    assert costs.decode_seconds > 0.050  # the average the slow steps moved: not a verify pass's price
    assert costs.plain_step_seconds(3) == costs.decode_seconds  # no step of three rows yet

    policy = SpeculationPolicy("lookup", 4, costs)
    rows = looping_rows(4)
    assert policy.wanted(rows, None) and policy.ready(rows, None, [False] * 4)
    drafts = policy.drafts(rows, None)
    assert drafts == [[1, 2, 3, 4]] * 4
    # A verify pass of the four rows took 70 ms (3.5 plain steps) and kept two of four drafts
    # a row: about 2.2 tokens a row per pass does not pay for it.
    policy.observe(rows, drafts, [2, 2, 2, 2], 0.070)
    assert policy.position_seconds == pytest.approx((0.070 - 0.020) / 16)  # a drafted position
    assert not any(row.speculation.active for row in rows)  # every row shadow: plain decoding


def test_a_run_of_verify_passes_stops_to_measure_a_plain_step_again():
    costs = StepCosts()
    for _ in range(2):
        costs.observe(2, 0, 1.0)
    policy = SpeculationPolicy("lookup", 4, costs)
    rows = looping_rows(2)
    assert policy.wanted(rows, None)
    for _ in range(SpeculationPolicy.PLAIN_PROBE):  # verify passes that pay, one after another
        assert policy.ready(rows, None, [False, False])
        drafts = policy.drafts(rows, None)
        policy.observe(rows, drafts, [len(d) for d in drafts], 1.0)
        assert policy.wanted(rows, None)
    # No plain step was measured during the run: the batch decodes plainly to measure one,
    # its rows still active (they draft again right after).
    assert not policy.ready(rows, None, [False, False])
    assert all(row.speculation.active for row in rows) and policy.plain_probes == 1
    costs.observe(2, 0, 1.0)  # the first plain step (a pipelined batch's only queues its pass)
    assert not policy.ready(rows, None, [False, False])
    costs.observe(2, 0, 1.0)
    assert policy.ready(rows, None, [False, False]) and policy.plain_probes == 2
    # A plain step with prompt tokens in it does not price a plain step: it does not count.
    for _ in range(SpeculationPolicy.PLAIN_PROBE):
        policy.observe(rows, policy.drafts(rows, None), [4, 4], 1.0)
    costs.observe(2, 300, 3.0)
    assert not policy.ready(rows, None, [False, False])


def test_a_batch_whose_step_a_prompt_waits_for_decodes_plainly():
    costs = StepCosts()
    costs.observe(2, 0, 1.0)
    policy = SpeculationPolicy("lookup", 4, costs)
    rows = looping_rows(2)
    assert policy.wanted(rows, None) and policy.ready(rows, None, [False, False])
    policy.prompts_waiting = True  # (the engine: a prompt has chunks left after this step)
    assert not policy.ready(rows, None, [False, False]) and policy.prompt_holds == 1
    assert all(row.speculation.active for row in rows)  # they draft again once it is done
    policy.prompts_waiting = False
    assert policy.ready(rows, None, [False, False])
