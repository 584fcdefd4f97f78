"""What writing KV blocks through to the SSD (cold) tier costs the engine, side by side in one run.

Three engines on the same model in one process, measured in interleaved rounds: "off" without
the cold tier (the hot tier only), "on" with it (``paged_ssd_cache_dir``), and "eager" with it
but writing as soon as a block is queued (the writer not waiting for the engine's prefill steps
to end, as before that was added):

  unique      time to first token of a prompt never seen before (its blocks are then stored,
              and with the cold tier written to disk); the writes of the previous round are
              finished before each measurement
  back2back   time to first token of the next request sent right after the previous one ended
              (each a new prompt): its prefill runs while the previous prompt's blocks are
              still being written
  drain       how long after the last request the writer needed to finish (cold tier only)

Prints each engine's median over rounds (back2back: of each round's median request) and, as
benchmarks/rounds.py states every ratio, the median of the per-round ratios to off.

    .venv/bin/python benchmarks/bench_cold_write.py [--preset small] [--prompt 692] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from benchmarks.bench_engine import model_path, prompt_ids  # noqa: E402
from benchmarks.rounds import Comparison, order  # noqa: E402


def run(llm, prompt, max_tokens):
    from inference.engine import SamplingParams

    start = time.perf_counter()
    first = None
    for event in llm.engine.submit(
        prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    ):
        if first is None and event.token_ids:
            first = time.perf_counter() - start
    return first


def flush(llm):
    cold = llm.engine.call(lambda e: e.prefix_cache.cold)
    if cold is not None:
        cold.flush()


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="small")
    parser.add_argument("--prompt", type=int, default=692, help="prompt tokens")
    parser.add_argument("--block", type=int, default=256, help="cache block size")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--burst", type=int, default=4, help="requests per back-to-back burst")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    from inference.engine import LLM

    path = model_path(args.preset)
    cache_dir = Path(tempfile.mkdtemp(prefix="omlx-coldwrite-"))
    seed = iter(range(1000, 10**6))
    names = ("off", "on", "eager")
    times = {n: {"unique": [], "back2back": [], "drain": []} for n in names}
    try:
        with (
            LLM(path, cache_block_size=args.block) as off,
            LLM(path, cache_block_size=args.block, paged_ssd_cache_dir=str(cache_dir / "on")) as on,
            LLM(path, cache_block_size=args.block, paged_ssd_cache_dir=str(cache_dir / "eager")) as eager,
        ):
            eager_cold = eager.engine.call(lambda e: e.prefix_cache.cold)
            eager_cold.defer_writes = lambda busy: None
            engines = {"off": off, "on": on, "eager": eager}
            for llm in engines.values():  # warm-up (compile, first writes)
                for _ in range(2):
                    run(llm, prompt_ids(args.prompt, next(seed)), 1)
                flush(llm)
            for r in range(args.rounds):
                turn = order(names, r)
                for name in turn:
                    llm = engines[name]
                    times[name]["unique"].append(run(llm, prompt_ids(args.prompt, next(seed)), 1))
                    flush(llm)
                for name in turn:
                    llm = engines[name]
                    burst = [run(llm, prompt_ids(args.prompt, next(seed)), 1) for _ in range(args.burst)]
                    times[name]["back2back"].append(statistics.median(burst[1:]))
                    start = time.perf_counter()
                    flush(llm)
                    if name != "off":
                        times[name]["drain"].append(time.perf_counter() - start)
            stats = on.engine.call(lambda e: e.prefix_cache.cold.stats)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    med = {n: {k: statistics.median(v) if v else 0.0 for k, v in d.items()} for n, d in times.items()}
    print(
        f"model {args.preset}, {args.prompt}-token prompts, block {args.block}, {args.rounds} rounds; "
        f"cold writes {stats.writes}, dropped {stats.dropped}, errors {stats.write_errors}"
    )
    print("TTFT: each engine's median over rounds; ratios: the median of the per-round ratios")
    print("| case | off (ms) | eager (ms) | on (ms) | eager / off | on / off |")
    print("|---|---|---|---|---|---|")
    for case in ("unique", "back2back"):
        m = {n: med[n][case] for n in names}
        ratio = {n: Comparison(case, times[n][case], times["off"][case]).ratio for n in ("eager", "on")}
        print(
            f"| {case} TTFT | {m['off'] * 1e3:.1f} | {m['eager'] * 1e3:.1f} | {m['on'] * 1e3:.1f} | "
            f"{ratio['eager']:.3f} | {ratio['on']:.3f} |"
        )
    print(
        f"| drain after a burst | | {med['eager']['drain'] * 1e3:.1f} | {med['on']['drain'] * 1e3:.1f} | | |"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"medians": med, "raw": times}, indent=2))


if __name__ == "__main__":
    main()
