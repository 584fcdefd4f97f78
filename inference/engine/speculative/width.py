"""How wide a verify pass is: every row of a decode batch runs as many positions as the longest
draft (``verify``), so one long draft makes every row pay for its width. The width is chosen
for the batch as a whole, from the drafts the rows propose, each row's acceptance and what a
wider pass costs.

Cost model: a verify pass of width W (the input and W - 1 drafted positions per row) costs
``1 + slope * (W - 1)`` plain decode steps of the same batch. ``slope`` is measured from the
verify passes (``SpeculationPolicy.observe``): near 0 where a pass is bound by reading the
weights (a GPU, a small batch), larger where the positions' arithmetic shows (a CPU, a large
batch, a long context).

A row with acceptance a that drafts m tokens emits 1 + a + ... + a^m tokens on average (its
drafts are accepted up to the first rejection; one more token always follows). The width kept
is the one with the most tokens per unit of cost over the whole batch; the drafts are cut to
it. Width 1 (no draft) is a plain step: the batch then decodes one token per row.
"""

from __future__ import annotations

from typing import List, Sequence


def expected_tokens(acceptance: float, m: int) -> float:
    """Tokens a verify pass emits on average for a row that drafts ``m`` tokens."""
    a = min(max(acceptance, 0.0), 0.999)
    return (1 - a ** (m + 1)) / (1 - a)


def best_width(lengths: Sequence[int], acceptances: Sequence[float], slope: float) -> int:
    """The verify width (1 + drafted positions) with the most expected tokens per unit of cost,
    for rows that propose ``lengths[i]`` tokens with acceptance ``acceptances[i]`` (a row that
    proposes none emits one token at any width). Ties go to the narrower pass."""
    widest = 1 + max(lengths, default=0)
    best, best_rate = 1, float(len(lengths))
    for width in range(2, widest + 1):
        tokens = sum(expected_tokens(a, min(width - 1, m)) for m, a in zip(lengths, acceptances))
        rate = tokens / (1 + slope * (width - 1))
        if rate > best_rate:
            best, best_rate = width, rate
    return best


def cut(drafts: Sequence[Sequence[int]], width: int) -> List[List[int]]:
    """The drafts cut to a pass of ``width`` positions."""
    return [list(d[: width - 1]) for d in drafts]
