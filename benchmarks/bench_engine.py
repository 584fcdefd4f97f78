"""omlx's engine next to bare mlx-lm on the same weights, side by side in one run.

Measures, on a Qwen2.5-0.5B-shaped model with random weights (float32 on disk):
  - prefill tokens/s of a 512-token prompt (time to first token);
  - decode tokens/s of 1 stream;
  - aggregate decode tokens/s of 4, 16 and 32 concurrent streams;
  - a burst of 32 short prompts (16 to 47 tokens) arriving at once: seconds to the last of
    their first tokens;
  - with --context N: 4 streams with N-token prompts (an agent's conversation), the seconds to
    the last of their first tokens and their aggregate decode tokens/s, where attention over
    the context is a large part of each step;
for omlx's engine, mlx-lm's generate_step (1 stream) and mlx-lm's BatchGenerator (batches),
all in one process on omlx's default Linux CPU path (OpenBLAS, float32). Each round measures the
two engines back to back (which goes first alternates); a ratio is omlx / mlx-lm of one round
(for the burst: omlx's seconds / mlx-lm's, lower is better), the figure is the median of the
per-round ratios, so the slow drifts of a shared machine hit both sides of a pair alike.

With --speedup N: the Linux speed-up, N rounds of prefill of the same 256-token prompt by mlx-lm
on stock mlx-cpu (the wheel's reference BLAS, in a child process, as a user gets it) and by omlx
on its default path (OpenBLAS, this process), the two interleaved; ratio per round, median.

With --step-trace N: only the cost of the engine's step trace (inference/engine/step_trace.py):
the single-stream decode row on two omlx engines over the same weights, one with the trace off
(the default) and one keeping the last N steps, measured back to back in each round; the
ratio is on / off per round, median (1.0: the trace costs nothing measurable).

Aggregate decode is measured the same way for both engines: per-token timestamps, counted over
the window in which every stream is decoding (after the last first token, before the first last
token), so prefill never enters the decode figure.

    .venv/bin/python benchmarks/bench_engine.py [--quick] [--rounds N] [--streams 4,16,32] [--context N]
        [--decode-tokens N] [--speedup N] [--step-trace N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from benchmarks.rounds import Comparison, order  # noqa: E402


def model_path(preset: str) -> Path:
    from inference.testkit.registry import build_model

    path = REPO / "benchmarks" / "out" / "models" / f"qwen2-{preset}"
    if not (path / "config.json").exists():
        print(f"building {preset} model in {path} ...", flush=True)
        build_model(path, arch="qwen2", preset=preset, seed=0)
    return path


def prompt_ids(n: int, seed: int, vocab: int = 1000):
    import random

    rng = random.Random(seed)
    return [rng.randrange(10, vocab) for _ in range(n)]


def steady_rate(timestamps):
    """Tokens per second over the window in which every stream was decoding."""
    start = max(ts[0] for ts in timestamps)
    end = min(ts[-1] for ts in timestamps)
    if end <= start:
        return float("nan")
    n = sum(sum(1 for t in ts if start < t <= end) for ts in timestamps)
    return n / (end - start)


# -- omlx -------------------------------------------------------------------------------------


class Omlx:
    name = "omlx"

    def __init__(self, path, max_streams, **settings):
        from inference.engine import LLM

        self.llm = LLM(
            path, max_concurrent_requests=max_streams, step_token_budget=max(2048, max_streams), **settings
        )

    def run(self, prompts, max_tokens):
        """Timestamps are taken by a callback on the engine thread as each event is published,
        the way a server's relay receives them (no consumer thread per stream)."""
        import threading

        from inference.engine import SamplingParams

        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        stamps = [[] for _ in prompts]
        left = [len(prompts)]
        done = threading.Event()

        def on_event(i, event):
            if event.token_ids:
                stamps[i].append(time.perf_counter())
            if event.finished:
                left[0] -= 1
                if not left[0]:
                    done.set()

        start = time.perf_counter()
        for i, p in enumerate(prompts):
            self.llm.engine.submit(p, params, callback=lambda e, i=i: on_event(i, e))
        done.wait()
        return start, stamps

    def close(self):
        self.llm.close()


# -- bare mlx-lm ------------------------------------------------------------------------------


class MlxLm:
    name = "mlx-lm"

    def __init__(self, path, max_streams):
        from mlx_lm.utils import load

        import mlx.core as mx

        self.model, self.tokenizer = load(str(path))
        self.model.set_dtype(mx.float32)  # the same dtype omlx runs on this CPU
        self.max_streams = max_streams

    def run(self, prompts, max_tokens):
        import mlx.core as mx
        from mlx_lm.generate import BatchGenerator, generate_step

        if len(prompts) == 1:
            start = time.perf_counter()
            stamps = []
            for _, n in zip(
                generate_step(mx.array(prompts[0]), self.model, max_tokens=max_tokens), range(max_tokens)
            ):
                stamps.append(time.perf_counter())
            return start, [stamps]
        gen = BatchGenerator(
            self.model,
            max_tokens=max_tokens,
            completion_batch_size=len(prompts),
            prefill_batch_size=len(prompts),
        )
        start = time.perf_counter()
        uids = gen.insert(prompts)
        index = {u: i for i, u in enumerate(uids)}
        stamps = [[] for _ in prompts]
        done = 0
        while done < len(prompts):
            for r in gen.next_generated():
                stamps[index[r.uid]].append(time.perf_counter())
                done += r.finish_reason is not None
        gen.close()
        return start, stamps

    def close(self):
        pass


# -- the measurements -------------------------------------------------------------------------


def measure_prefill(engine, n_prompt, seed):
    start, stamps = engine.run([prompt_ids(n_prompt, seed)], 1)
    return n_prompt / (stamps[0][0] - start)


def measure_decode(engine, streams, n_prompt, max_tokens, seed):
    prompts = [prompt_ids(n_prompt, seed + i) for i in range(streams)]
    _, stamps = engine.run(prompts, max_tokens)
    if streams == 1:
        ts = stamps[0]
        return (len(ts) - 1) / (ts[-1] - ts[0])
    return steady_rate(stamps)


def measure_burst(engine, n, seed):
    """Seconds from submitting n short prompts at once to the last of their first tokens."""
    prompts = [prompt_ids(16 + (7 * i) % 32, seed + i) for i in range(n)]
    start, stamps = engine.run(prompts, 2)
    return max(ts[0] for ts in stamps) - start


CONTEXT_STREAMS = 4  # the streams of the --context rows


def measure_context(engine, n_prompt, max_tokens, seed):
    """(seconds to the last first token, aggregate decode tok/s) of ``CONTEXT_STREAMS`` prompts
    of ``n_prompt`` tokens submitted at once."""
    prompts = [prompt_ids(n_prompt, seed + i) for i in range(CONTEXT_STREAMS)]
    start, stamps = engine.run(prompts, max_tokens)
    return max(ts[0] for ts in stamps) - start, steady_rate(stamps)


def main_default(args):
    """Each round measures both engines back to back (which goes first alternates), and the
    figure reported for a measurement is the median over rounds of omlx / mlx-lm: slow drifts
    of a shared machine hit both sides of a pair alike."""
    path = model_path(args.preset)
    streams = [1] + args.streams
    rates = {}  # (measurement, engine) -> [rate per round]
    engines = {cls.name: cls(path, max(streams + [args.burst])) for cls in (Omlx, MlxLm)}
    for engine in engines.values():  # warm-up: first calls pay for allocation and compile
        measure_prefill(engine, 64, seed=1)
        for b in streams:
            measure_decode(engine, b, 8, 4, seed=2)
    for r in range(args.rounds):
        turn = [(name, engines[name]) for name in order(list(engines), r)]
        for name, engine in turn:
            rate = measure_prefill(engine, args.prompt, seed=100 + r)
            rates.setdefault(("prefill", name), []).append(rate)
            print(f"  round {r}: {name:7s} prefill {args.prompt} tokens: {rate:8.1f} tok/s", flush=True)
        for b in streams:
            for name, engine in turn:
                rate = measure_decode(engine, b, args.decode_prompt, args.decode_tokens, seed=1000 * b + r)
                rates.setdefault((f"decode@{b}", name), []).append(rate)
                print(f"  round {r}: {name:7s} decode x{b:<2d}: {rate:8.2f} tok/s", flush=True)
        for name, engine in turn:
            seconds = measure_burst(engine, args.burst, seed=5000 + 100 * r)
            rates.setdefault(("burst", name), []).append(seconds)
            print(
                f"  round {r}: {name:7s} burst of {args.burst}: last first token after {seconds:6.2f} s",
                flush=True,
            )
        for name, engine in turn if args.context else ():
            seconds, rate = measure_context(engine, args.context, args.decode_tokens, seed=7000 + 100 * r)
            rates.setdefault(("context prefill", name), []).append(seconds)
            rates.setdefault(("context decode", name), []).append(rate)
            print(
                f"  round {r}: {name:7s} {CONTEXT_STREAMS} x {args.context}-token prompts: "
                "last first token after "
                f"{seconds:6.2f} s, decode {rate:6.2f} tok/s",
                flush=True,
            )
    for engine in engines.values():
        engine.close()
    results = {}
    context = ["context prefill", "context decode"] if args.context else []
    for measurement in ["prefill"] + [f"decode@{b}" for b in streams] + ["burst"] + context:
        ours, theirs = rates[(measurement, "omlx")], rates[(measurement, "mlx-lm")]
        results[measurement] = {
            "omlx": statistics.median(ours),
            "mlx-lm": statistics.median(theirs),
            "ratio": Comparison(measurement, ours, theirs).ratio,
            "rounds": {"omlx": ours, "mlx-lm": theirs},
        }
    return results


def main_stock(args):
    """Runs in a child process with OMLX_BLAS=reference: mlx-lm's prefill on stock mlx-cpu."""
    engine = MlxLm(model_path(args.preset), 1)
    measure_prefill(engine, 8, seed=1)
    print(json.dumps({"mlx-lm": measure_prefill(engine, args.speedup_prompt, seed=args.seed)}))


def main_speedup(args):
    """The Linux speed-up: the same prompt length on both sides, the two interleaved (which goes
    first alternates), a ratio per round, the median."""
    engine = Omlx(model_path(args.preset), 1)
    measure_prefill(engine, 8, seed=1)
    ratios, ours, stock = [], [], []

    def stock_rate(seed):
        child = subprocess.run(
            [sys.executable, __file__, "--stock", "--seed", str(seed)] + (["--quick"] if args.quick else []),
            env={**os.environ, "OMLX_BLAS": "reference"},
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(child.stdout.strip().splitlines()[-1])["mlx-lm"]

    for r in range(args.speedup):
        seed = 300 + r
        if r % 2:
            theirs, mine = stock_rate(seed), measure_prefill(engine, args.speedup_prompt, seed)
        else:
            mine, theirs = measure_prefill(engine, args.speedup_prompt, seed), stock_rate(seed)
        ours.append(mine)
        stock.append(theirs)
        ratios.append(mine / theirs)
        print(
            f"  speed-up round {r}: omlx default path {mine:8.1f} tok/s, stock mlx-cpu mlx-lm "
            f"{theirs:8.2f} tok/s: {mine / theirs:.1f}x",
            flush=True,
        )
    engine.close()
    return {
        "omlx": statistics.median(ours),
        "stock mlx-lm": statistics.median(stock),
        "ratio": Comparison("speedup", ours, stock).ratio,
        "rounds": ratios,
    }


def main_step_trace(args):
    """Single-stream decode with the step trace off and on, back to back in each round (which
    goes first alternates); the figure is the median of the per-round ratios on / off."""
    path = model_path(args.preset)
    on = f"trace {args.step_trace}"
    engines = {"trace off": Omlx(path, 1), on: Omlx(path, 1, step_trace=args.step_trace)}
    for engine in engines.values():  # warm-up
        measure_decode(engine, 1, 8, 4, seed=2)
    rates = {name: [] for name in engines}
    for r in range(args.rounds):
        for name in order(list(engines), r):
            rate = measure_decode(engines[name], 1, args.decode_prompt, args.decode_tokens, seed=9000 + r)
            rates[name].append(rate)
            print(f"  round {r}: {name:11s} decode x1: {rate:8.2f} tok/s", flush=True)
    steps = len(engines[on].llm.engine.step_trace())
    for engine in engines.values():
        engine.close()
    off, on = rates["trace off"], rates[on]
    ratio = Comparison("step trace", on, off).ratio
    print(
        f"| decode, 1 stream (tok/s, median of {args.rounds} rounds) | trace off | trace on "
        f"(last {args.step_trace} steps) | on / off |\n|---|---|---|---|\n"
        f"| {args.preset} | {statistics.median(off):.2f} | {statistics.median(on):.2f} | {ratio:.3f} |"
    )
    print("  per-round ratios " + " ".join(f"{a / b:.3f}" for a, b in zip(on, off)) + f"; {steps} steps kept")
    return {
        "step trace": {
            "off": statistics.median(off),
            "on": statistics.median(on),
            "ratio": ratio,
            "rounds": {"off": off, "on": on},
        }
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small model, fewer tokens (a smoke run)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--streams",
        default="4,16,32",
        metavar="LIST",
        help="the batch sizes of the aggregate decode rows, comma-separated ('' for none; "
        "the 1-stream row always runs)",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=0,
        metavar="N",
        help="also measure 4 streams with N-token prompts: time to the last first token, decode tok/s",
    )
    parser.add_argument(
        "--speedup",
        type=int,
        default=0,
        metavar="N",
        help="also measure the Linux speed-up over stock mlx-cpu, N interleaved rounds",
    )
    parser.add_argument(
        "--decode-tokens",
        type=int,
        default=0,
        metavar="N",
        help="tokens generated per stream in the decode rows (default 32, 16 with --quick); "
        "more makes each round's single-stream figure a longer, steadier window",
    )
    parser.add_argument(
        "--step-trace",
        type=int,
        default=0,
        metavar="N",
        help="only measure the step trace's cost: single-stream decode with it off and "
        "keeping N steps, interleaved rounds",
    )
    parser.add_argument("--stock", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decode_tokens < 0:
        parser.error("--decode-tokens must be positive")
    args.preset = "small" if args.quick else "qwen2.5-0.5b"
    args.prompt = 512
    args.speedup_prompt = 256
    args.streams = [int(n) for n in args.streams.split(",") if n.strip()]
    args.burst = 32
    args.decode_prompt = 32
    args.decode_tokens = args.decode_tokens or (16 if args.quick else 32)
    if args.stock:
        return main_stock(args)

    from inference import platform

    print(f"platform: {platform.describe()}; model preset {args.preset}", flush=True)
    if args.step_trace:
        results = main_step_trace(args)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return
    results = main_default(args)
    p = results["prefill"]
    lines = [
        f"| measurement (median of {args.rounds} rounds) | omlx | mlx-lm | omlx / mlx-lm |",
        "|---|---|---|---|",
        f"| prefill, {args.prompt}-token prompt (tok/s) | "
        f"{p['omlx']:.1f} | {p['mlx-lm']:.1f} | {p['ratio']:.3f} |",
    ]
    for b in [1] + args.streams:
        ref = "generate_step" if b == 1 else "BatchGenerator"
        d = results[f"decode@{b}"]
        lines.append(
            f"| decode, {b} stream{'s' if b > 1 else ''} (tok/s, mlx-lm {ref}) | "
            f"{d['omlx']:.2f} | {d['mlx-lm']:.2f} | {d['ratio']:.3f} |"
        )
    b = results["burst"]
    lines.append(
        f"| burst of {args.burst} prompts: last first token (s, mlx-lm BatchGenerator; lower is better) | "
        f"{b['omlx']:.2f} | {b['mlx-lm']:.2f} | {b['ratio']:.3f} |"
    )
    if args.context:
        c, d = results["context prefill"], results["context decode"]
        lines.append(
            f"| {CONTEXT_STREAMS} x {args.context}-token prompts: last first token "
            "(s, mlx-lm BatchGenerator; lower is better) | "
            f"{c['omlx']:.2f} | {c['mlx-lm']:.2f} | {c['ratio']:.3f} |"
        )
        lines.append(
            f"| decode, {CONTEXT_STREAMS} streams at {args.context}-token context "
            "(tok/s, mlx-lm BatchGenerator) | "
            f"{d['omlx']:.2f} | {d['mlx-lm']:.2f} | {d['ratio']:.3f} |"
        )
    if args.speedup:
        print("Linux speed-up over stock mlx-cpu ...", flush=True)
        results["speedup"] = sp = main_speedup(args)
        lines += [
            "",
            f"| prefill, {args.speedup_prompt}-token prompt "
            f"(median of {args.speedup} interleaved rounds) | tok/s |",
            "|---|---|",
            f"| mlx-lm on stock mlx-cpu (reference BLAS) | {sp['stock mlx-lm']:.2f} |",
            f"| omlx default path (OpenBLAS, float32) | {sp['omlx']:.1f} |",
            f"| speed-up (median of per-round ratios) | {sp['ratio']:.1f}x |",
        ]
    print("\n".join(lines))
    for key, value in results.items():
        if "rounds" in value and isinstance(value["rounds"], dict):
            print(
                f"  {key}: per-round ratios "
                + " ".join(f"{o / t:.3f}" for o, t in zip(value["rounds"]["omlx"], value["rounds"]["mlx-lm"]))
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
