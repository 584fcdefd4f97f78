"""The benchmark scripts state their figures one way: benchmarks/rounds.py (the order of the
sides per round, the median of per-round ratios, a table that cannot contradict itself), and
bench_blas.py times every cell alike. Fixed numbers for the arithmetic; real callables for the
timing; the scripts' smallest modes end to end (marked slow: minutes on a shared 2-core CPU)."""

import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from benchmarks import bench_blas
from benchmarks.rounds import Comparison, compare, medians_table, order, ratio_table, run_rounds

REPO = Path(__file__).resolve().parents[2]


def test_order_alternates_two_sides_and_rotates_more():
    assert [order(["omlx", "mlx-lm"], r) for r in range(3)] == [
        ["omlx", "mlx-lm"],
        ["mlx-lm", "omlx"],
        ["omlx", "mlx-lm"],
    ]
    assert [order(("a", "b", "c"), r)[0] for r in range(4)] == ["a", "b", "c", "a"]
    seen = []
    runs = run_rounds(["x", "y"], 3, lambda name: seen.append(name) or len(seen), log=lambda line: None)
    assert seen == ["x", "y", "y", "x", "x", "y"]
    assert runs == {"x": [1, 4, 5], "y": [2, 3, 6]}  # aligned by round


def test_ratio_is_the_median_of_per_round_ratios():
    # each side's median is 50, so a ratio of medians would say 1.0; the rounds say 0.5
    c = Comparison("figure", [100.0, 1.0, 50.0], [50.0, 2.0, 100.0])
    assert c.ratios == [2.0, 0.5, 0.5]
    assert c.ratio == 0.5
    assert c.medians == (50.0, 50.0)
    assert c.median_round in (1, 2) and c.ours[c.median_round] / c.theirs[c.median_round] == c.ratio
    inverted = Comparison("time", [1.0, 4.0, 3.0], [2.0, 2.0, 6.0], invert=True)  # theirs / ours
    assert inverted.ratios == [2.0, 0.5, 2.0] and inverted.ratio == 2.0
    even = Comparison("even", [1.0, 2.0], [1.0, 1.0])
    assert even.ratio == 1.5 and even.median_round is None
    skipped = compare(
        "skip",
        [{"v": 2.0}, {"v": 0.0}, {"v": None}],
        [{"v": 1.0}, {"v": 3.0}, {"v": 1.0}],
        lambda run: run["v"],
    )
    assert skipped.ratios == [2.0]  # a round where a side measured nothing does not count


def _rows(table: str):
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_ratio_table_never_contradicts_the_values_next_to_it():
    import random

    rng = random.Random(3)
    comparisons = []
    for i in range(200):
        n = rng.choice([1, 3, 5, 7])
        comparisons.append(
            Comparison(
                f"f{i}",
                [rng.uniform(1, 1000) for _ in range(n)],
                [rng.uniform(1, 1000) for _ in range(n)],
                invert=bool(i % 2),
            )
        )
    rows = _rows(ratio_table(comparisons, "omlx", "other", "ratio", lambda c, v: f"{v:.4g}"))
    assert len(rows) == len(comparisons)
    for c, (name, ours, theirs, ratio, per_round) in zip(comparisons, rows):
        shown = float(theirs) / float(ours) if c.invert else float(ours) / float(theirs)
        assert float(ratio.rstrip("x")) == pytest.approx(shown, rel=0.01, abs=0.006), name
        assert per_round.split() == [f"{r:.2f}" for r in c.ratios]
    # each side's median goes in a table of its own, with no ratio to contradict
    assert _rows(medians_table(comparisons[:1], "omlx", "other"))[0][1:] == [
        f"{v:.2f}" for v in comparisons[0].medians
    ]


def test_bench_servers_figures_are_medians_of_per_round_ratios():
    from benchmarks.bench_servers import comparisons

    def run(tokens_per_s, ttft):
        return {
            "prefill": [
                {"concurrency": 1, "tokens_per_s": {"aggregate": tokens_per_s}, "ttft_s": {"p50": ttft}}
            ],
            "decode": [],
            "cache": {"cold": {"p50": ttft}, "cached": {"p50": ttft}},
        }

    runs = {
        "omlx": [run(100, 1.0), run(1, 4.0), run(50, 3.0)],
        "mlx-lm": [run(50, 2.0), run(2, 2.0), run(100, 6.0)],
    }
    figures = {c.name: c for c in comparisons(runs)}
    assert figures["prefill tokens/s aggregate, c=1"].ratio == 0.5  # omlx / mlx-lm, rounds 2.0 0.5 0.5
    assert figures["prefill TTFT p50, c=1"].ratio == 2.0  # a time: mlx-lm / omlx, above 1 is omlx faster


class Counted(bench_blas.Cell):
    """A real callable that takes ``first`` seconds of ``clock`` (a one-item list: the time
    bench_blas reads) on its first call, ``each`` after; every call is logged to ``calls`` with the
    cell's name. A clock of the test's, so that the figures do not depend on the machine's load."""

    def __init__(self, name, calls, first, each, clock):
        self.n = 0

        def fn():
            self.n += 1
            calls.append(name)
            clock[0] += first if self.n == 1 else each

        super().__init__(fn)


def test_bench_blas_times_every_cell_alike(monkeypatch):
    calls = []
    clock = [0.0]
    monkeypatch.setattr(
        bench_blas, "time", types.SimpleNamespace(perf_counter=lambda: clock[0], sleep=time.sleep)
    )
    # the baseline is slow, and slower still on its warm-up call; the others are fast
    cells = {
        "base": Counted("base", calls, first=1.0, each=0.02, clock=clock),
        "fast": Counted("fast", calls, first=0.002, each=0.002, clock=clock),
        "mid": Counted("mid", calls, first=0.01, each=0.01, clock=clock),
    }
    seconds = bench_blas.measure(cells, rounds=3, sample_time=0.006)
    assert bench_blas.calls_per_sample([1.0, 0.002, 0.01], 0.006) == 3  # k from the fastest warm-up
    # the same warm-up and the same number of timed calls for every cell, whatever its speed
    counts = {cell.n for cell in cells.values()}
    assert len(counts) == 1
    k, left = divmod(counts.pop() - 1, 3)
    assert k >= 1 and left == 0
    assert all(len(s) == 3 for s in seconds.values())
    # interleaved: the warm-ups, then each round takes one sample of every cell, the order rotating
    rounds = [calls[3 + i * 3 * k : 3 + (i + 1) * 3 * k : k] for i in range(3)]
    assert rounds == [["base", "fast", "mid"], ["fast", "mid", "base"], ["mid", "base", "fast"]]
    # the baseline's figure comes from its timed calls, not from its 1-second warm-up
    assert seconds["base"] == pytest.approx([0.02] * 3)
    # ratios: the median over rounds of baseline / cell seconds, fixed numbers
    fixed = {"base": [10.0, 1.0, 10.0], "cell": [1.0, 1.0, 5.0]}  # rounds 10, 1, 2; ratio of medians 10
    assert bench_blas.speed_ratio(fixed, "cell", baseline="base") == 2.0
    assert bench_blas.speed_ratio(fixed, "base", baseline="base") == 1.0


def run_script(*args, timeout=1500):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def check_ratio_rows(stdout: str, invert_if=lambda name: False):
    """Every ratio row of a script's table agrees with the two values printed next to it."""
    rows = [
        line for line in stdout.splitlines() if line.startswith("|") and re.search(r"\| [\d.]+x \|", line)
    ]
    assert rows, stdout
    for line in rows:
        name, ours, theirs, ratio = [cell.strip() for cell in line.strip("|").split("|")][:4]
        a, b = (float(v.split()[0]) for v in (ours, theirs))
        shown = b / a if invert_if(name) else a / b
        assert float(ratio.rstrip("x")) == pytest.approx(shown, rel=0.05, abs=0.01), line
    return rows


@pytest.mark.slow
def test_bench_servers_smallest_run(tmp_path):
    out = run_script(
        "benchmarks/bench_servers.py", "--preset", "small", "--model-preset", "tiny", "--rounds", "1"
    )
    rows = check_ratio_rows(out, invert_if=lambda name: "TTFT" in name)
    assert any(r.startswith("| TTFT cached p50 |") for r in rows)
    assert "median of the per-round ratios" in out and "errors []" in out


@pytest.mark.slow
def test_bench_blas_smallest_run(tmp_path):
    out = run_script(
        "benchmarks/bench_blas.py",
        "--quick",
        "--rounds",
        "1",
        "--sample-time",
        "0.001",
        "--gap",
        "0",
        "--json",
        str(tmp_path / "blas.json"),
    )
    assert "median of 1 per-round ratios" in out
    ratio_rows = out.split("ratio to stock mlx-cpu float32")[1]
    assert ratio_rows.count("| 1.00x |") >= 5  # the baseline column against itself, every row


def test_every_benchmark_command_in_the_docs_exists():
    """Each `benchmarks/NAME.py --flag ...` quoted in docs/benchmarks.md names a script of the
    repository and flags that script defines, so every figure's command can be run as written."""
    text = (REPO / "docs" / "benchmarks.md").read_text()
    commands = re.findall(r"benchmarks/(\w+)\.py([^`\n]*)", text)
    assert len({name for name, _ in commands}) >= 9
    for name, rest in commands:
        script = REPO / "benchmarks" / f"{name}.py"
        assert script.exists(), name
        source = script.read_text()
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest.split("#")[0]):
            assert (
                f'"{flag}"' in source or '"--" + name' in source and flag[2:].replace("-", "_") in source
            ), f"{name}.py has no {flag}"
