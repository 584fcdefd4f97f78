"""How a round of prefill rows is split into forward passes (inference.engine.prefill.passes):
every row in exactly one pass, rows of consecutive widths together, and the least estimated
cost (B x W + pass_tokens per pass), checked against every possible split."""

import itertools
import random

import pytest

from inference.engine.prefill import passes


def _cost(groups, pass_tokens):
    return sum(len(g) * max(n for _, n in g) + pass_tokens for g in groups)


def _rows(widths):
    return [(f"r{i}", n) for i, n in enumerate(widths)]


def _brute(rows, pass_tokens):
    """The least cost over every split of the distinct widths into runs."""
    widths = sorted({n for _, n in rows})
    best = None
    for cuts in itertools.product([False, True], repeat=len(widths) - 1):
        groups, current = [], [widths[0]]
        for w, cut in zip(widths[1:], cuts):
            if cut:
                groups.append(current)
                current = []
            current.append(w)
        groups.append(current)
        cost = _cost([[r for r in rows if r[1] in g] for g in groups], pass_tokens)
        best = cost if best is None else min(best, cost)
    return best


def test_equal_widths_are_one_pass():
    rows = _rows([16] * 7)
    assert passes(rows, 1) == [rows]


def test_a_short_row_leaves_a_long_pass_when_padding_costs_more_than_a_pass():
    rows = _rows([100, 1])
    assert passes(rows, 10) == [[("r1", 1)], [("r0", 100)]]  # 121 < 210; shortest first
    assert passes(rows, 500) == [[("r0", 100), ("r1", 1)]]  # 600 < 1101


@pytest.mark.parametrize("seed", range(40))
def test_the_split_is_the_cheapest_and_keeps_every_row(seed):
    rng = random.Random(seed)
    rows = _rows([rng.choice([1, 2, 5, 16, 17, 31, 47, 64, 200, 512]) for _ in range(rng.randint(1, 12))])
    pass_tokens = rng.choice([1, 8, 25, 128, 1000])
    groups = passes(rows, pass_tokens)
    assert sorted(r for g in groups for r in g) == sorted(rows)  # each row exactly once
    spans = [(min(n for _, n in g), max(n for _, n in g)) for g in groups]
    assert all(hi < lo for (_, hi), (lo, _) in zip(spans, spans[1:]))  # consecutive widths, shortest first
    assert _cost(groups, pass_tokens) == _brute(rows, pass_tokens)
    order = {r: i for i, r in enumerate(rows)}
    assert all([order[r] for r in g] == sorted(order[r] for r in g) for g in groups)  # rows keep their order


def test_the_burst_of_the_benchmark_splits_on_this_cpu():
    """bench_engine's burst (32 prompts of 16 to 47 tokens) with a pass worth 25 tokens (this
    machine's 0.5B model): fewer padded tokens than one pass of 32 x 47."""
    rows = _rows([16 + (7 * i) % 32 for i in range(32)])
    groups = passes(rows, 25)
    assert len(groups) > 1
    assert _cost(groups, 25) < 32 * 47 + 25
