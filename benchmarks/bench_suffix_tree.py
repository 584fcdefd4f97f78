"""The suffix drafter's cost against the size of the model's answers (docs/benchmarks.md):
``propose(8)`` over a tree of 1,000 answer tokens and over one of 60,000, in alternating rounds
(the ratio should stay near 1: a bounded number of lookups), and what folding an answer costs.
Answers are random tokens (vocabulary 2,000), the worst case for the tree's size.

    .venv/bin/python benchmarks/bench_suffix_tree.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference.engine.speculative.answers import AnswerStore  # noqa: E402
from inference.engine.speculative.suffix import SuffixDrafter  # noqa: E402


def store_of(answers, measure_memory: bool):
    """(the store holding ``answers``, seconds to fold them, bytes per node or None)."""
    store = AnswerStore(max_tokens=10**9, max_nodes=10**9)
    if measure_memory:
        tracemalloc.start()
    began = time.perf_counter()
    for answer in answers:
        store.add(answer)
    store.fold(budget=sum(map(len, answers)))
    seconds = time.perf_counter() - began
    per_node = None
    if measure_memory:
        per_node = tracemalloc.get_traced_memory()[0] / store.nodes
        tracemalloc.stop()
    return store, seconds, per_node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(0)
    drafters = {}
    for count in (5, 300):
        answers = [[rng.randrange(2000) for _ in range(200)] for _ in range(count)]
        store, seconds, per_node = store_of(answers, measure_memory=count == 5)
        drafter = SuffixDrafter(store)
        drafter.extend(answers[0][:50])  # the start of an answer held: a long match
        drafters[count] = drafter
        memory = f", {per_node:.0f} bytes a node" if per_node else ""
        print(
            f"{count * 200} tokens: {store.nodes} nodes{memory}, "
            f"{seconds / (count * 200) * 1e6:.1f} us a token folded"
        )
    times = {count: [] for count in drafters}
    for i in range(args.rounds):
        for count in (5, 300) if i % 2 == 0 else (300, 5):
            began = time.perf_counter()
            for _ in range(200):
                drafters[count].propose(8)
            times[count].append((time.perf_counter() - began) / 200)
    small, large = statistics.median(times[5]), statistics.median(times[300])
    print(
        f"propose(8): {small * 1e6:.1f} us over 1,000 tokens, {large * 1e6:.1f} us over 60,000: "
        f"ratio {large / small:.2f}"
    )


if __name__ == "__main__":
    main()
