"""What stop strings cost the engine, side by side in one run (issue 25).

One request of 2,000 greedy output tokens (ignore_eos) on the tiny test model, with no stop
strings and with the largest stops the OpenAI routes take: 4 stop strings of 1,000 characters
(inference/api/common/caps.py). Two kinds of stops:

- ``following``: each is 999 characters of the request's own output and one character it never
  writes, so the text keeps matching long prefixes of them and the stream holds text back all
  the way (the hard case for a hold-back check);
- ``random``: 1,000 random letters and spaces (the usual case: nothing to hold back).

Measured per round, in alternating order: the engine thread's CPU time over the request, first
token to last (wall time on a shared machine swings by 2x), and the ratio of each stop kind to
the request without stops (whole runs: the machine's noise shows, tens of percent on 2 busy
cores). Then the check alone, precisely: the engine's text stream replayed over the same
tokens with and without the stops (best of 3), its extra time per token over the engine's time
per token: the engine time ratio to hold under 1 %. Last, the check omlx had before (a rescan
of a window of the stops' length and a hold-back search of every prefix length after each
token), one round each.

    .venv/bin/python benchmarks/bench_stops.py [--tokens 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from inference.engine import LLM, SamplingParams  # noqa: E402
from inference.engine.text_stream import TextStream, streaming_detokenizer  # noqa: E402

PROMPT = "Write a long story about the sea."
STOPS, STOP_CHARS = 4, 1_000


def model_folder() -> Path:
    from inference.testkit.registry import build_model

    for base in (Path("/work/main/benchmarks/out/models"), REPO / "benchmarks" / "out" / "models"):
        if (base / "qwen2-tiny" / "config.json").exists():
            return base / "qwen2-tiny"
    path = Path("/tmp/omlx-bench-stops/qwen2-tiny")
    if not (path / "config.json").exists():
        build_model(path, arch="qwen2", preset="tiny", seed=0)
    return path


class PreviousTextStream(TextStream):
    """The stop check omlx had before the StopMatcher (for reference only): after each token,
    every stop string searched from ``emitted - longest stop``, and the hold-back found by
    trying every prefix length of every stop string."""

    def __init__(self, detokenizer, stop=(), include_stop=False):
        super().__init__(detokenizer, (), include_stop)
        self._stop = tuple(stop)

    def _advance(self, text, final):
        if self.stopped:
            return "", True
        visible_end = len(text)
        if self._stop:
            start = max(0, self._emitted - max(len(s) for s in self._stop))
            hits = [(text.find(s, start), s) for s in self._stop]
            hits = [(i, s) for i, s in hits if i >= 0]
            if hits:
                index, stop = min(hits)
                self.stopped = True
                visible_end = index + (len(stop) if self._include_stop else 0)
            elif not final:
                longest = 0
                for stop in self._stop:
                    for n in range(min(len(stop) - 1, len(text)), longest, -1):
                        if text.endswith(stop[:n]):
                            longest = n
                            break
                visible_end -= longest
        delta = text[self._emitted : visible_end] if visible_end > self._emitted else ""
        self._emitted = max(self._emitted, visible_end)
        return delta, self.stopped


def stop_sets(text: str) -> dict:
    rng = random.Random(0)
    following = []
    for k in range(STOPS):
        start = (k * len(text)) // STOPS
        piece = (text[start:] + text)[: STOP_CHARS - 1]
        following.append(piece + "\x07")  # a character the model never writes: no match
    letters = "abcdefghijklmnopqrstuvwxyz "
    randoms = ["".join(rng.choice(letters) for _ in range(STOP_CHARS)) for _ in range(STOPS)]
    return {"following": following, "random": randoms}


def timed(cls):
    """``cls`` recording the engine thread's CPU time from the request's first token to its
    flush in ``timed.last`` (two clock reads a request: nothing per token)."""

    class Timed(cls):
        def add(self, token_id):
            if not hasattr(self, "first"):
                self.first = time.thread_time()
            return super().add(token_id)

        def flush(self):
            out = super().flush()
            timed.last = time.thread_time() - self.first
            return out

    return Timed


def stream_us_per_token(cls, tokenizer, token_ids, stops, passes: int = 3) -> float:
    best = float("inf")
    for _ in range(passes):
        stream = cls(streaming_detokenizer(tokenizer), stops)
        started = time.perf_counter()
        for token in token_ids:
            stream.add(token)
        stream.flush()
        best = min(best, time.perf_counter() - started)
    return best / len(token_ids) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import inference.engine.engine as engine_module

    with LLM(str(model_folder()), max_concurrent_requests=1) as llm:

        def run(stops, cls=TextStream):
            # the engine makes each request's TextStream: this run's class, timed
            engine_module.TextStream = timed(cls)
            params = SamplingParams(max_tokens=args.tokens, temperature=0, ignore_eos=True, stop=stops)
            result = llm.generate([PROMPT], params)[0]
            assert result.finish_reason == "length"
            return timed.last, result

        _, plain = run(None)  # warm-up, and the text the "following" stops are cut from
        sets = stop_sets(plain.text)
        print(
            f"tiny model, {args.tokens} output tokens ({len(plain.text)} characters), "
            f"{STOPS} stops of {STOP_CHARS} characters; CPU time of the engine thread\n"
        )
        runs = {"none": [], **{name: [] for name in sets}}
        for r in range(args.rounds):
            for name in ["none", *sets] if r % 2 == 0 else [*sets, "none"]:
                figures, result = run(sets.get(name))
                assert result.text == plain.text, name
                runs[name].append(figures)
        print(f"{'request':10} {'engine thread CPU s, per round':>42} {'median':>7}")
        for name, spans in runs.items():
            rounds = " ".join(f"{x:7.3f}" for x in spans)
            print(f"{name:10} {rounds:>42} {statistics.median(spans):7.3f}")
        none = statistics.median(runs["none"])
        per_token_us = none / args.tokens * 1e6
        print()
        for name in sets:
            whole = [f / n for f, n in zip(runs[name], runs["none"])]
            print(
                f"{name} stops / no stops, whole runs: median {statistics.median(whole):.3f} "
                f"(rounds {' '.join(f'{x:.3f}' for x in whole)}; the machine's noise)"
            )

        build = min(_build_seconds(sets["random"]) for _ in range(5))
        print(
            f"\nbuilding the matcher of 4 x 1000 characters (at submit, before the engine thread "
            f"has the request; counted below): {build * 1e3:.1f} ms"
        )
        tokenizer = llm.tokenizer
        print("\nthe check alone: the text stream over the same tokens, us per token (best of 3)")
        base = stream_us_per_token(TextStream, tokenizer, plain.token_ids, ())
        print(f"  no stops                   {base:8.2f}")
        for name, stops in sets.items():
            us = stream_us_per_token(TextStream, tokenizer, plain.token_ids, stops)
            print(
                f"  {name:10} stop matcher    {us:8.2f}   engine time with / without stops: "
                f"{1 + ((us - base) * args.tokens / 1e6 + build) / none:.4f} "
                f"(engine thread: {per_token_us:.0f} us per token)"
            )

        previous = {}
        for name, stops in sets.items():
            span, result = run(stops, PreviousTextStream)
            assert result.text == plain.text, name
            previous[name] = span
        print("\nthe check omlx had before, one round each:")
        for name, span in previous.items():
            print(f"  {name} stops: engine thread {span:.3f} s ({span / none:.2f}x the median without stops)")


def _build_seconds(stops) -> float:
    from inference.engine.stop_matcher import StopMatcher

    began = time.perf_counter()
    StopMatcher(stops)
    return time.perf_counter() - began


if __name__ == "__main__":
    main()
