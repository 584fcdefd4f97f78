"""The closed-loop model of issue 24 (benchmarks/sim_closed_loop.py): counts of steps, prompts and
passes under each rule (simulated seconds only)."""

import pytest

from benchmarks.sim_closed_loop import RULES, Load, simulate

LOAD = Load()  # 4 clients, 12 conversations x 3 turns


@pytest.mark.parametrize("rule", RULES)
def test_every_turn_is_answered_whole(rule):
    result = simulate(rule, LOAD)
    assert len(result.latency) == len(result.ttft) == LOAD.conversations * LOAD.turns
    assert result.tokens == LOAD.conversations * LOAD.turns * LOAD.gen
    assert all(0 < t < lat for t, lat in zip(result.ttft, result.latency))


def test_together_gathers_arrivals_into_shared_steps_and_passes():
    result = simulate("together", LOAD)
    requests = LOAD.conversations * LOAD.turns
    assert result.prompt_steps < requests and result.passes < requests
    assert max(prompts for prompts, _ in result.composition) >= 3


def test_one_apart_computes_one_prompt_a_step_with_a_decode_step_between():
    result = simulate("one-apart", LOAD)
    requests = LOAD.conversations * LOAD.turns
    assert result.prompt_steps == result.passes == requests
    assert all(prompts <= 1 for prompts, _ in result.composition)
    for (before, _), (after, rows) in zip(result.composition, result.composition[1:]):
        assert not (before and after and rows)  # never two prompt steps in a row while rows decode
    # the arrivals no longer queue behind each other's prompts
    assert (
        sorted(result.ttft)[len(result.ttft) // 2]
        < sorted(simulate("together", LOAD).ttft)[len(result.ttft) // 2]
    )
