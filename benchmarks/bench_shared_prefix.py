"""Concurrent requests that share a prompt prefix, with and without computing it once.

8 requests submitted at once, on a Qwen2.5-0.5B-shaped model with random weights (float32),
block size 256, 16 generated tokens each, an empty cache at the start of every case:
  n=8      8 identical prompts: a 2,048-token system prompt + 32 tokens (an API request with n=8)
  agents   the same system prompt + a different 128-token user message each
  alone    one such prompt by itself (what storing blocks after every chunk costs)
each measured with ``share_inflight_prefixes`` on and off, back to back in one run (which goes
first alternates per round); ratios are medians of the per-round ratios. Reported per case:
mean and last time to first token, time until all 8 finished, and the prompt tokens computed.

    .venv/bin/python benchmarks/bench_shared_prefix.py [--quick] [--rounds N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from benchmarks.bench_engine import model_path, prompt_ids  # noqa: E402


def workloads(system_tokens: int):
    system = prompt_ids(system_tokens, 1)
    return {
        "n=8": [system + prompt_ids(32, 2)] * 8,
        "agents": [system + prompt_ids(128, 10 + i) for i in range(8)],
        "alone": [system + prompt_ids(32, 2)],
    }


def run_case(path, prompts, share: bool, max_tokens: int) -> dict:
    """Submit all prompts at once to a fresh engine; time each one's first token and the end."""
    from inference.engine import LLM, SamplingParams

    with LLM(path, share_inflight_prefixes=share, max_concurrent_requests=16) as llm:
        llm.generate([prompt_ids(16, 3)], SamplingParams(max_tokens=2))  # warm-up, unrelated tokens
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        first, usage, tokens = {}, {}, {}
        done = threading.Semaphore(0)

        def on_event(i, event):
            if event.token_ids and i not in first:
                first[i] = time.perf_counter() - start
            tokens.setdefault(i, []).extend(event.token_ids)
            if event.finished:
                usage[i] = event.usage
                done.release()

        start = time.perf_counter()
        for i, prompt in enumerate(prompts):
            llm.engine.submit(prompt, params, callback=lambda e, i=i: on_event(i, e))
        for _ in prompts:
            done.acquire()
        total = time.perf_counter() - start
    return {
        "ttft_mean": statistics.mean(first.values()),
        "ttft_last": max(first.values()),
        "total": total,
        "computed": sum(u.computed_prompt_tokens for u in usage.values()),
        "cached": sum(u.cached_tokens for u in usage.values()),
        "tokens": [tokens[i] for i in range(len(prompts))],
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="the small model")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    preset = "small" if args.quick else "qwen2.5-0.5b"
    path = model_path(preset)
    cases = workloads(2048)
    results = {name: {"on": [], "off": []} for name in cases}
    for round_ in range(args.rounds):
        for name, prompts in cases.items():
            order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for mode in order:
                r = run_case(path, prompts, share=mode == "on", max_tokens=16)
                results[name][mode].append(r)
                print(
                    f"round {round_ + 1} {name:6} {mode:3}: ttft mean {r['ttft_mean']:.2f} s, "
                    f"last {r['ttft_last']:.2f} s, total {r['total']:.2f} s, "
                    f"computed {r['computed']}, cached {r['cached']}",
                    flush=True,
                )
            on, off = results[name]["on"][-1], results[name]["off"][-1]
            assert on["tokens"] == off["tokens"], f"{name}: outputs differ with sharing on"

    def ratio(name, key):
        return statistics.median(
            on[key] / off[key] for on, off in zip(results[name]["on"], results[name]["off"])
        )

    print(f"\nmodel {preset}, 2048-token shared prefix, block size 256, {args.rounds} round(s)")
    print(
        "| case | prompt tokens computed (off -> on) | mean TTFT on/off | last TTFT on/off | total on/off |"
    )
    print("|---|---|---:|---:|---:|")
    summary = {}
    for name in cases:
        off_c, on_c = results[name]["off"][0]["computed"], results[name]["on"][0]["computed"]
        summary[name] = {key: ratio(name, key) for key in ("ttft_mean", "ttft_last", "total")}
        summary[name].update(computed_off=off_c, computed_on=on_c)
        print(
            f"| {name} | {off_c} -> {on_c} | {summary[name]['ttft_mean']:.3f} | "
            f"{summary[name]['ttft_last']:.3f} | {summary[name]['total']:.3f} |"
        )
    if args.json:
        raw = {
            n: {m: [{k: v for k, v in r.items() if k != "tokens"} for r in rs] for m, rs in modes.items()}
            for n, modes in results.items()
        }
        Path(args.json).write_text(json.dumps({"preset": preset, "ratios": summary, "runs": raw}, indent=2))


if __name__ == "__main__":
    main()
