"""What the adaptive rule prices a verify pass against (issue 27 under an agent load): a plain
decode step of the batch's own size, from recent plain steps (``StepCosts.plain_step_seconds``),
not an average that one slow step or another batch size moved; and a run of verify passes
stops for plain steps that measure that price again. Counted in decisions, never timed: the
step times are given to the real ``StepCosts`` as an engine would observe them."""

import pytest

from inference.engine import SamplingParams
from inference.engine.request import Request
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


def two_drafting_rows() -> tuple:
    """(costs, policy, rows): two looping rows of a lookup policy whose plain step of two rows
    is priced at 1 s, asked ``wanted`` once."""
    costs = StepCosts()
    for _ in range(2):
        costs.observe(2, 0, 1.0)
    policy = SpeculationPolicy("lookup", 4, costs)
    rows = looping_rows(2)
    assert policy.wanted(rows, None)
    return costs, policy, rows


def test_a_run_of_verify_passes_stops_to_measure_a_plain_step_again():
    costs, policy, rows = two_drafting_rows()
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
    # The probe's steps cost what the price said: the next probe waits twice as many passes.
    assert policy.plain_probe_after == 2 * SpeculationPolicy.PLAIN_PROBE
    # A plain step with prompt tokens in it does not price a plain step: it does not count.
    for _ in range(policy.plain_probe_after):
        policy.observe(rows, policy.drafts(rows, None), [4, 4], 1.0)
    costs.observe(2, 300, 3.0)
    assert not policy.ready(rows, None, [False, False])


def test_plain_probes_grow_apart_while_the_price_holds_and_close_up_when_it_moves():
    costs, policy, rows = two_drafting_rows()

    def passes_until_probe(limit=200) -> int:
        """Verify passes until the batch stops for a plain probe."""
        for n in range(limit):
            if not policy.ready(rows, None, [False, False]):
                return n
            policy.observe(rows, policy.drafts(rows, None), [4, 4], 1.9)
        raise AssertionError("no plain probe")

    def probe(seconds) -> None:
        for _ in range(SpeculationPolicy.PROBE_PLAIN_STEPS):
            costs.observe(2, 0, seconds)

    gaps = []
    for _ in range(5):  # the price holds (a plain step within 15% of 1.0 s): 8, 16, 32, 64, 64
        gaps.append(passes_until_probe())
        probe(1.1)
    assert gaps == [8, 16, 32, 64, 64]
    assert passes_until_probe() == 64
    probe(1.5)  # the plain step moved by half: probes close up again
    assert passes_until_probe() == SpeculationPolicy.PLAIN_PROBE
    probe(1.5)  # (the price is a median of 8: it still says about 1.1 s; the steps say 1.5)
    assert passes_until_probe() == SpeculationPolicy.PLAIN_PROBE


def test_a_probe_during_which_the_batch_changed_size_does_not_space_probes_out():
    """A probe measures the plain step of the batch size it began with: if a row joined (or
    left) meanwhile, its steps priced another size, so it says nothing about the price it was
    to check and the next probe comes after ``PLAIN_PROBE`` passes again, not twice as many."""
    costs, policy, rows = two_drafting_rows()
    for _ in range(SpeculationPolicy.PLAIN_PROBE):
        assert policy.ready(rows, None, [False, False])
        policy.observe(rows, policy.drafts(rows, None), [4, 4], 1.9)
    assert not policy.ready(rows, None, [False, False])  # the probe of two rows begins
    three = rows + looping_rows(3)[2:]  # a third row joins: the probe's steps are of three rows
    assert policy.wanted(three, None)
    for _ in range(SpeculationPolicy.PROBE_PLAIN_STEPS):
        costs.observe(3, 0, 1.0)
    assert policy.ready(three, None, [False] * 3)
    assert policy.plain_probe_after == SpeculationPolicy.PLAIN_PROBE
    # (the two-row steps on record still say 1.0 s: without the batch-size check this probe
    # would have passed as one whose price held)


def test_a_batch_whose_step_a_prompt_waits_for_decodes_plainly_before_a_pass_is_priced():
    costs = StepCosts()
    costs.observe(2, 0, 1.0)
    policy = SpeculationPolicy("lookup", 4, costs)
    rows = looping_rows(2)
    assert policy.wanted(rows, None) and policy.ready(rows, None, [False, False])
    policy.waiting = 1  # (the engine: a prompt has chunks left after this step)
    assert not policy.ready(rows, None, [False, False]) and policy.prompt_holds == 1
    assert all(row.speculation.active for row in rows)  # they draft again once it is done
    policy.waiting = 0
    assert policy.ready(rows, None, [False, False])


def test_a_dear_pass_is_measured_again_within_tens_of_steps_and_outvoted():
    """A first verify pass that cost 50 plain steps (a batch still forming, a loaded moment)
    keeps the batch plain, but only ``PROBE_MIN`` steps: then a probe pass measures again, the
    next probe waits twice as long, and the median of the measured passes, not an average the
    dear one still weighs on, prices a drafted position once two cheap passes outvote it. A
    pass the rules chose themselves sets the wait back."""
    costs = StepCosts()
    for _ in range(8):
        costs.observe(4, 0, 0.020)  # a plain step of the four rows: 20 ms
    policy = SpeculationPolicy("lookup", 4, costs)
    params = SamplingParams(max_tokens=1000, temperature=0, ignore_eos=True)
    rows = [Request(f"r{i}", [1, 2, 3, 4, 5, 6] * 3, params, None, frozenset(), None, 0) for i in range(4)]
    wait = SpeculationPolicy.PROBE_MIN

    def advance(row, n):  # the row's next n tokens: the loop goes on
        for _ in range(n):
            row.output_token_ids.append((len(row.prompt_token_ids) + len(row.output_token_ids)) % 6 + 1)

    def steps_until_a_pass(limit):  # (None: no pass within ``limit`` steps)
        for step in range(1, limit + 1):
            if policy.wanted(rows, None) and policy.ready(rows, None, [False] * 4):
                return step
            for row in rows:  # a plain step
                advance(row, 1)
        return None

    def verify(seconds):
        drafts = policy.drafts(rows, None)
        assert all(drafts)
        for row, draft in zip(rows, drafts):  # every draft kept (the rows loop), and one more
            advance(row, len(draft) + 1)
        policy.observe(rows, drafts, [len(d) for d in drafts], seconds)

    assert steps_until_a_pass(1) == 1
    verify(1.0)  # 16 positions for 0.98 s more than a plain step: 61 ms a position
    assert policy.position_seconds == pytest.approx(0.98 / 16)
    # plain until the cost is stale, then a probe at a shadow row's next proposal (every 4 tokens)
    assert wait <= steps_until_a_pass(wait + 4) <= wait + 4
    verify(0.040)  # a probe that costs two plain steps
    assert policy.probes == 1 and policy.probe_after == 2 * wait
    assert 2 * wait <= steps_until_a_pass(2 * wait + 4) <= 2 * wait + 4  # a median of two: still dear
    verify(0.040)
    assert policy.probes == 2 and policy.position_seconds == pytest.approx(0.020 / 16)
    assert steps_until_a_pass(1) == 1  # two cheap passes outvote the dear one: the rules go on
    verify(0.040)
    assert policy.probes == 2 and policy.probe_after == wait

    # A pass of three rows, where no plain step of three rows was measured (the price would be
    # the average over every batch size): it measures no drafted position.
    other = SpeculationPolicy("lookup", 4, costs)
    three = looping_rows(3)
    assert other.wanted(three, None) and other.ready(three, None, [False] * 3)
    other.observe(three, other.drafts(three, None), [4, 4, 4], 1.0)
    assert other.position_seconds is None and other.verify_seconds == 1.0


def _priced(rows: int, verify: float) -> tuple:
    """A policy whose plain step of ``rows`` rows costs 20 ms, after one verify pass of
    ``verify`` seconds in which every row kept its four drafts (acceptance 0.72: 2.88 tokens a
    row expected from a pass of four drafts)."""
    costs = StepCosts()
    for _ in range(4):
        costs.observe(rows, 0, 0.020)
    policy = SpeculationPolicy("lookup", 4, costs)
    batch = looping_rows(rows)
    assert policy.wanted(batch, None) and policy.ready(batch, None, [False] * rows)
    drafts = policy.drafts(batch, None)
    policy.observe(batch, drafts, [4] * rows, verify)
    assert [r.speculation.acceptance for r in batch] == [pytest.approx(0.72)] * rows
    return policy, batch


@pytest.mark.parametrize(
    "rows, verify, waiting, holds",
    [
        (2, 0.040, 0, False),  # nobody waits: the pass runs
        # A pass of two plain steps: one waiting request loses 20 ms; each row would finish
        # 20 - 40 / 2.88 = 6.1 ms later decoding plainly: two rows 12.2 ms, four 24.4 ms.
        (2, 0.040, 1, True),
        (4, 0.040, 1, False),
        (4, 0.040, 2, True),
        # A pass about a plain step (a GPU): 2 ms a waiting request against 12.4 ms a row.
        (2, 0.022, 1, False),
        (2, 0.022, 4, False),
    ],
)
def test_requests_waiting_for_the_step_hold_a_pass_that_gains_the_rows_less(rows, verify, waiting, holds):
    policy, batch = _priced(rows, verify)
    policy.waiting = waiting
    assert policy.ready(batch, None, [False] * rows) is not holds
    assert policy.prompt_holds == holds
    assert all(r.speculation.active for r in batch)  # held or not, the rows stay active


def test_a_row_that_drafts_nothing_counts_for_the_hold():
    """Four drafting rows outweigh one waiting request (above: 24.4 ms against 20 ms); two more
    rows that draft nothing (a verify pass gives each one token for 40 ms, a plain step for 20)
    tip it: the same request holds the pass of the six."""
    policy, batch = _priced(6, 0.040)
    for row in batch[4:]:
        row.speculation.active = False  # shadow: no draft, one token from the pass
    assert policy.ready(batch, None, [False] * 6)
    policy.waiting = 1
    assert not policy.ready(batch, None, [False] * 6) and policy.prompt_holds == 1
