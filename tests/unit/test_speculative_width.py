"""The verify pass's width (inference.engine.speculative.width): a batch's drafts are cut to
the width with the most expected tokens per unit of cost, counting the rows that do not draft,
and a batch whose best width is 1 decodes plainly (no verify pass). Counted in passes and
drafted tokens, never timed."""

import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.speculative import SpeculationPolicy
from inference.engine.speculative.width import best_width, expected_tokens
from inference.engine.step_costs import StepCosts
from tests.support.token_ids import looping_rows

GREEDY = dict(temperature=0, ignore_eos=True)
PROMPTS = [[20, 21, 22, 23, 20, 21], [30, 31, 32, 33, 34, 30, 31]]  # the tiny model loops on them


def test_the_width_follows_acceptance_cost_and_the_rows_that_do_not_draft():
    assert expected_tokens(0.5, 0) == 1 and expected_tokens(0.5, 2) == 1.75
    assert best_width([8], [0.95], 0.0) == 9  # free positions: the whole draft
    assert best_width([8], [0.95], 5.0) == 1  # each position costs five steps: none
    assert best_width([8], [0.7], 0.3) == 3  # 2.19 tokens in 1.6 steps: the most per step
    # One row drafting next to 15 that do not: its extra tokens do not pay for 16 wider rows.
    assert best_width([8] + [0] * 15, [0.95] + [0.0] * 15, 0.3) == 1
    assert best_width([8] * 16, [0.95] * 16, 0.3) > 1  # all of them drafting: they do
    assert best_width([], [], 0.0) == 1 and best_width([0, 0], [0.9, 0.9], 0.0) == 1


def test_measured_verify_costs_cut_the_drafts_and_keep_a_batch_plain():
    costs = StepCosts()
    costs.observe(2, 0, 1.0)  # a plain step of the two rows: 1 s
    policy = SpeculationPolicy("lookup", 8, costs)
    rows = looping_rows(2)
    assert policy.wanted(rows, None) and policy.position_seconds is None
    assert policy.drafts(rows, None) == [[1, 2, 3, 4, 5, 6, 1, 2]] * 2  # no cost known: uncut
    costs.token_seconds = 5.0  # before any verify pass, the prefill's cost of a token
    assert not policy.ready(rows, None, [False, False])  # a position costs 10 steps: plain
    assert not any(row.speculation.active for row in rows)  # shadow: acceptance still measured
    costs.token_seconds = 0.0
    for row in rows:
        row.speculation.active = True
    assert policy.drafts(rows, None) == [[1, 2, 3, 4, 5, 6, 1, 2]] * 2  # free positions: uncut
    policy.observe(rows, [[1, 2, 3, 4, 5, 6, 1, 2]] * 2, [2, 2], 3.4)  # 2 x 8 positions: 2.4 s more
    assert policy.position_seconds == pytest.approx(0.15)  # a width slope of 0.3 for 2 rows
    policy.verify_seconds = 1.0  # (each row on its own pays: the width is what is tested)
    for row in rows:
        row.output_token_ids += [1, 2, 3]
        row.speculation.active, row.speculation.acceptance = True, 0.7
    assert policy.wanted(rows, None) and policy.ready(rows, None, [False, False])
    assert policy.drafts(rows, None) == [[4, 5]] * 2  # cut to width 3 (as in the test above)
    for row in rows:
        row.speculation.acceptance = 0.1
    assert not policy.ready(rows, None, [False, False])  # width 1: the batch stays plain
    for row in rows:
        row.speculation.active = True
    policy.since_verify = policy.probe_after  # a stale cost: drafted again, uncut
    assert policy.ready(rows, None, [False, False]) and len(policy.drafts(rows, None)[0]) == 3
    policy.since_verify, policy.position_seconds = 0, 100.0  # dear positions, but a batch of one:
    assert policy.ready(rows[:1], None, [False]) and len(policy.drafts(rows[:1], None)[0]) == 3
    # its own rule (``_pays``) decides: the width rule is for rows that ride along


def test_a_batch_whose_drafts_do_not_pay_for_their_width_runs_no_verify_pass(model_dir):
    """On the engine: the same two looping requests draft and verify while a drafted position
    costs nothing, and run plain passes only (as many as speculation off) while one costs more
    than its tokens could give; the output is plain greedy decoding's either way."""
    with LLM(model_dir(arch="llama", preset="tiny"), max_concurrent_requests=2) as llm:
        costs = StepCosts()  # a plain step costs 1 s: every row pays for itself (the per-row rule)
        costs.decode_seconds = 1.0
        llm.engine.call(lambda e: setattr(e.runner.speculation, "costs", costs))
        params = dict(max_tokens=40, **GREEDY)
        want = [r.token_ids for r in llm.generate(PROMPTS, SamplingParams(**params))]
        counts = {}
        for slope in (0.0, 100.0):

            def measured(e, slope=slope):  # what a drafted position costs: nothing, 100 plain steps
                e.runner.speculation.position_seconds, e.runner.speculation.since_verify = slope, 0

            llm.engine.call(measured)
            before = llm.engine.call(lambda e: (e.runner.batch.passes, e.runner.batch.counters.verify_passes))
            got = llm.generate(PROMPTS, SamplingParams(speculative="lookup", num_draft_tokens=4, **params))
            after = llm.engine.call(lambda e: (e.runner.batch.passes, e.runner.batch.counters.verify_passes))
            assert [r.token_ids for r in got] == want
            counts[slope] = (after[0] - before[0], after[1] - before[1])
        assert counts[0.0][1] > 0 and counts[0.0][0] < 39  # verified: fewer passes than tokens
        # plain: none verified, one pass per token after the first (a pass or two more when, on a
        # loaded machine, the second request's prompt lands a step after the first's)
        assert counts[100.0][1] == 0 and 39 <= counts[100.0][0] <= 41
