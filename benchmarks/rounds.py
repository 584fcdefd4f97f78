"""Rounds of a side-by-side comparison, and the one way every benchmark states a ratio.

A comparison measures each side once per round, back to back, the order rotating between rounds
(``order``), so the slow drifts of a shared machine hit both sides of a round alike. Its figure is
the median of the per-round ratios (``Comparison.ratio``), never the ratio of two medians: the two
can disagree (even on which side is faster) when the machine's speed drifts between rounds.

Invariant of ``Comparison``: ``ours``, ``theirs`` and ``ratios`` are aligned per round; filled
through ``add`` (or ``compare``), only rounds where both sides measured a non-zero value count.
With an odd number of rounds the median ratio is the ratio of one real round (``median_round``), so
a table that shows that round's two
values next to the ratio can never contradict it; ``medians`` (each side's own median) is for
context and is printed apart from the ratio.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

T = TypeVar("T")


def order(names: Sequence[T], round_index: int) -> List[T]:
    """The order of the sides in round ``round_index``: rotated by one each round (for two sides:
    alternating which goes first)."""
    k = round_index % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def run_rounds(
    names: Sequence[T],
    rounds: int,
    run_one: Callable[[T], object],
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Dict[T, list]:
    """``run_one(name)`` for every side, ``rounds`` times, the order rotating (``order``);
    name -> [its result of each round], aligned by round."""
    runs = {name: [] for name in names}
    for r in range(rounds):
        for name in order(names, r):
            runs[name].append(run_one(name))
            log(f"round {r + 1}/{rounds}: {name} done")
    return runs


@dataclass
class Comparison:
    """One figure of two sides over rounds. ``invert``: the ratio is theirs / ours (for times,
    so that above 1 still means ours is faster when the caller wants it that way)."""

    name: str
    ours: List[float] = field(default_factory=list)
    theirs: List[float] = field(default_factory=list)
    invert: bool = False

    def add(self, ours: Optional[float], theirs: Optional[float]) -> None:
        """One round's two values; a round where either side has none (or zero) is left out."""
        if ours and theirs:
            self.ours.append(ours)
            self.theirs.append(theirs)

    @property
    def ratios(self) -> List[float]:
        return [(t / o if self.invert else o / t) for o, t in zip(self.ours, self.theirs)]

    @property
    def ratio(self) -> Optional[float]:
        """The figure: the median of the per-round ratios (None without a round)."""
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def median_round(self) -> Optional[int]:
        """The round whose ratio is the median; None without rounds or for an even count (then
        the median is the mean of two rounds' ratios, and no single round has it)."""
        ratios = self.ratios
        if len(ratios) % 2 == 0:
            return None
        ranked = sorted(range(len(ratios)), key=ratios.__getitem__)
        return ranked[len(ranked) // 2]

    @property
    def medians(self) -> Optional[tuple]:
        """(ours, theirs): each side's own median over rounds; context, not the ratio."""
        if not self.ours:
            return None
        return statistics.median(self.ours), statistics.median(self.theirs)


def compare(
    name: str,
    runs_ours: Sequence[dict],
    runs_theirs: Sequence[dict],
    value: Callable[[dict], Optional[float]],
    invert: bool = False,
) -> Comparison:
    """A Comparison of ``value(run)`` over rounds paired by index."""
    c = Comparison(name, invert=invert)
    for a, b in zip(runs_ours, runs_theirs):
        c.add(value(a), value(b))
    return c


def ratio_table(
    comparisons: Sequence[Comparison],
    ours: str,
    theirs: str,
    ratio_label: str,
    show: Callable[[Comparison, float], str] = lambda c, v: f"{v:.2f}",
) -> str:
    """A markdown table, one row per comparison: the median round's two values, the median of
    the per-round ratios (exactly their ratio), and every round's ratio. With an even count of
    rounds no single round has the median ratio, so the value cells say "-". Rows without a round
    are left out."""
    lines = [
        f"| figure | {ours} (median round) | {theirs} (median round) | {ratio_label} | per-round ratios |",
        "|---|---:|---:|---:|---|",
    ]
    for c in comparisons:
        if c.ratio is None:
            continue
        i = c.median_round
        a, b = ("-", "-") if i is None else (show(c, c.ours[i]), show(c, c.theirs[i]))
        lines.append(
            f"| {c.name} | {a} | {b} | {c.ratio:.2f}x | " + " ".join(f"{r:.2f}" for r in c.ratios) + " |"
        )
    return "\n".join(lines)


def medians_table(
    comparisons: Sequence[Comparison],
    ours: str,
    theirs: str,
    show: Callable[[Comparison, float], str] = lambda c, v: f"{v:.2f}",
) -> str:
    """Each side's own median over rounds, with no ratio next to it (see the module docstring)."""
    lines = [f"| figure | {ours} (median of rounds) | {theirs} (median of rounds) |", "|---|---:|---:|"]
    for c in comparisons:
        if c.medians is not None:
            lines.append(f"| {c.name} | {show(c, c.medians[0])} | {show(c, c.medians[1])} |")
    return "\n".join(lines)
