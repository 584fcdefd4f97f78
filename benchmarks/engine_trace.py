"""Where omlx's engine spends a step, on bench_engine.py's model and workloads: the step trace
(inference/engine/step_trace.py) of a burst of 32 short prompts, of 4 long prompts decoding
after, and of one stream decoding, printed one line a step. For finding what a platform's steps
cost (it was written for the first CUDA run, where the burst's first tokens came 10x later than
mlx-lm's BatchGenerator's: docs/benchmarks.md, "CUDA").

    PYTHONPATH=. .venv/bin/python benchmarks/engine_trace.py [--quick] [--context 1536] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

import bench_engine  # noqa: E402

PARTS = ("restore", "merge", "store", "sampling", "launch", "device_wait", "prefill_compute")


def line(r) -> str:
    parts = {p: getattr(r, f"{p}_seconds") for p in PARTS}
    host = r.seconds - sum(parts.values())
    cells = " ".join(f"{p[:7]}={v * 1e3:6.1f}" for p, v in parts.items() if v >= 5e-4)
    return (
        f"step {r.step:4d} {r.seconds * 1e3:7.1f} ms  sched {r.schedule_seconds * 1e3:5.1f}  "
        f"decode {r.decode_rows:2d}{'v' if r.verify else ' '} prefill {r.prefill_rows:2d} rows "
        f"{r.prompt_tokens:5d} tok ({r.padded_tokens:5d} padded, {r.prefill_passes} passes) "
        f"first {r.first_tokens:2d}  host {host * 1e3:6.1f}  {cells}"
    )


def run(omlx, name, prompts, max_tokens, out):
    engine = omlx.llm.engine
    before = engine.steps
    start = time.perf_counter()
    _, stamps = omlx.run(prompts, max_tokens)
    wall = time.perf_counter() - start
    records = [r for r in engine.step_trace() if r.step > before]
    firsts = sorted(ts[0] - start for ts in stamps)
    print(
        f"\n== {name}: {len(prompts)} prompts, {max_tokens} tokens each: {wall:.3f} s, "
        f"first tokens {firsts[0]:.3f}..{firsts[-1]:.3f} s, {len(records)} steps, "
        f"sum of step times {sum(r.seconds for r in records):.3f} s",
        flush=True,
    )
    for r in records:
        print(line(r))
    out[name] = {"wall": wall, "first_tokens": firsts, "steps": [asdict(r) for r in records]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="bench_engine's small model")
    parser.add_argument("--context", type=int, default=1536, help="tokens of each of the 4 long prompts")
    parser.add_argument("--json", help="also write every record to this file")
    args = parser.parse_args()

    from inference import platform

    print(f"platform: {platform.describe()}", flush=True)
    path = bench_engine.model_path("small" if args.quick else "qwen2.5-0.5b")
    omlx = bench_engine.Omlx(path, 32, step_trace=10_000)  # the engine bench_engine.py measures
    out = {"platform": platform.describe()}
    try:
        burst = [bench_engine.prompt_ids(16 + (7 * i) % 32, 100 + i) for i in range(32)]
        warm = {}
        run(omlx, "warm-up burst", burst, 2, warm)
        for seed in (200, 300):
            burst = [bench_engine.prompt_ids(16 + (7 * i) % 32, seed + i) for i in range(32)]
            run(omlx, f"burst (seed {seed})", burst, 2, out)
        long = [bench_engine.prompt_ids(args.context, 400 + i) for i in range(4)]
        run(omlx, f"4 x {args.context}-token prompts", long, 8, out)
        run(omlx, "1 stream decode", [bench_engine.prompt_ids(32, 500)], 32, out)
    finally:
        omlx.close()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
