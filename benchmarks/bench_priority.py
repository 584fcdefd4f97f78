"""Interactive requests next to background work, in omlx's engine: how much later do the
interactive ones get their first token when 8 background requests run at the same time?

Two interactive chats take turns (a 256-token system prompt shared by both, 48 new tokens and 16
generated tokens per turn, the history growing by each answer, so each turn hits the cache for what the
previous one computed; the next turn starts 0.3 s after the previous answer ended); meanwhile
``--background`` requests (1,024-token prompts of their own, 64 generated tokens each, sent again as
soon as one ends) keep the engine busy. Three settings, run one after another in each round (the
order rotates between rounds):

- ``alone``: the interactive chats with nothing else running;
- ``mixed``: with the background load at ``priority`` 10 (the interactive ones at 0);
- ``mixed, no priorities``: the same load with every request at priority 0.

Every run has prompts of its own (no run hits another's cache). Reported: the interactive TTFT p50
and p95 of each setting, and the ratios mixed / alone per round (the figure: their median); and the
background requests' output tokens/s, to show what the
priority costs them. In-process (``inference.engine.LLM``), on a Qwen2.5-0.5B-shaped model with
random weights, float32 on this CPU's OpenBLAS path; ``--quick`` uses the small preset.

    .venv/bin/python benchmarks/bench_priority.py [--quick] [--rounds 3] [--background 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from inference.bench.stats import percentile  # noqa: E402
from benchmarks.bench_engine import model_path  # noqa: E402
from benchmarks.rounds import Comparison, order  # noqa: E402

SETTINGS = ("alone", "mixed", "mixed, no priorities")


def _ids(rng: random.Random, n: int):
    return [rng.randrange(10, 1000) for _ in range(n)]


class Background:
    """Keeps ``n`` long requests running until stopped; counts their output tokens."""

    def __init__(self, engine, n: int, priority: int, seed: int):
        from inference.engine import SamplingParams

        self.engine, self.n = engine, n
        self.params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, priority=priority)
        self.rng = random.Random(seed)
        self.tokens = 0
        self.stopped = False
        self.lock = threading.Lock()
        self.started = time.perf_counter()
        self.live = 0
        self.idle = threading.Event()

    def _submit(self):
        self.engine.submit(_ids(self.rng, 1024), self.params, callback=self._on_event)

    def _on_event(self, event):  # on the engine thread
        self.tokens += len(event.token_ids)
        if not event.finished:
            return
        with self.lock:
            again = not self.stopped
            if not again:
                self.live -= 1
                if not self.live:
                    self.idle.set()
        if again:
            self._submit()

    def start(self):
        self.live = self.n
        for _ in range(self.n):
            self._submit()

    def stop(self) -> float:
        """Stop sending, wait for the running ones; returns output tokens/s while it ran."""
        with self.lock:
            self.stopped = True
            seconds = time.perf_counter() - self.started
            tokens = self.tokens
            if not self.live:
                self.idle.set()
        self.idle.wait(600)
        return tokens / seconds


def interactive_ttfts(engine, turns: int, seed: int):
    """Two chats, ``turns`` turns each, at priority 0; returns every turn's TTFT in seconds."""
    from inference.engine import SamplingParams

    rng = random.Random(seed)
    system = _ids(rng, 256)
    ttfts, phases, lock = [], [], threading.Lock()

    def chat(c: int):
        history = system + _ids(rng, 48)
        for _ in range(turns):
            start = time.perf_counter()
            first = None
            tokens = []
            for event in engine.submit(
                history, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
            ):
                if event.token_ids and first is None:
                    first = time.perf_counter() - start
                tokens += event.token_ids
                if event.finished:
                    timings = event.usage.timings
            with lock:
                ttfts.append(first)
                phases.append(timings)
            history = history + tokens + _ids(rng, 48)
            time.sleep(0.3)

    threads = [threading.Thread(target=chat, args=(c,)) for c in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts, phases


def mean_phases(phases):
    return {k: statistics.mean(p[k] for p in phases) for k in phases[0]}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="the small model preset")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4, help="turns of each interactive chat per setting")
    parser.add_argument("--background", type=int, default=8, help="background requests kept running")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    from inference.engine import LLM

    path = model_path("small" if args.quick else "qwen2.5-0.5b")
    runs = {name: [] for name in SETTINGS}
    with LLM(path, max_concurrent_requests=16) as llm:
        engine = llm.engine
        interactive_ttfts(engine, 1, seed=1)  # warm-up
        for r in range(args.rounds):
            for name in order(SETTINGS, r):
                k = 10 * r + SETTINGS.index(name)  # fresh prompts for every run: no cache hits across runs
                background = None
                if name != "alone":
                    background = Background(
                        engine, args.background, 10 if name == "mixed" else 0, seed=100 + k
                    )
                    background.start()
                    time.sleep(2.0)  # the background load is running before the chats start
                ttfts, phases = interactive_ttfts(engine, args.turns, seed=1000 + k)
                rate = background.stop() if background is not None else None
                runs[name].append(
                    {"ttft_s": ttfts, "background_tokens_per_s": rate, "phases_s": mean_phases(phases)}
                )
                print(
                    f"round {r + 1}: {name:22s} interactive TTFT p50 {percentile(ttfts, 50):6.2f} s, p95 "
                    f"{percentile(ttfts, 95):6.2f} s" + (f"; background {rate:.1f} tok/s" if rate else ""),
                    flush=True,
                )
    print(
        f"\ninteractive TTFT with {args.background} background requests (median of {args.rounds} rounds; "
        "ratio = mixed / alone, median of per-round ratios)"
    )
    print(
        "| setting | TTFT p50 | TTFT p95 | p50 / alone | p95 / alone | background tok/s |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    alone = runs["alone"]
    for name in SETTINGS:
        p50 = [percentile(run["ttft_s"], 50) for run in runs[name]]
        p95 = [percentile(run["ttft_s"], 95) for run in runs[name]]
        a50 = [percentile(run["ttft_s"], 50) for run in alone]
        a95 = [percentile(run["ttft_s"], 95) for run in alone]
        rates = [run["background_tokens_per_s"] for run in runs[name] if run["background_tokens_per_s"]]
        print(
            f"| {name} | {statistics.median(p50):.2f} s | {statistics.median(p95):.2f} s | "
            f"{Comparison(name, p50, a50).ratio:.2f}x | "
            f"{Comparison(name, p95, a95).ratio:.2f}x | "
            f"{statistics.median(rates):.1f} |"
            if rates
            else f"| {name} | {statistics.median(p50):.2f} s | {statistics.median(p95):.2f} s | "
            "1.00x | 1.00x | |"
        )
    print(
        "\nwhere the interactive requests' time went "
        "(engine phases, mean seconds per request, median of rounds)"
    )
    print("| setting | queue | restore | prefill | prefill_wait | decode |\n|---|---:|---:|---:|---:|---:|")
    for name in SETTINGS:
        values = [
            statistics.median(run["phases_s"][k] for run in runs[name])
            for k in ("queue", "restore", "prefill", "prefill_wait", "decode")
        ]
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in values) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
