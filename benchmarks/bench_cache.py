"""Time to first token with the block cache, side by side in one run.

On a Qwen2.5-0.5B-shaped model with random weights (float32), for one long prompt:
  cold      nothing cached: the whole prompt is computed
  hot       the same prompt again: its blocks are in RAM
  cold-hit  after the hot tier was flushed to disk: blocks are read from the SSD tier
  restart   in a fresh process: the SSD tier found at start-up
  mlx-lm    bare mlx-lm computing the same prompt (reference for the cold case)
then a conversation of 8 turns, each appending ~200 new tokens, reporting per turn the prompt
tokens that came from the cache and those that were computed.

    .venv/bin/python benchmarks/bench_cache.py [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from benchmarks.bench_engine import model_path  # noqa: E402


def ids(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(10, 1000) for _ in range(n)]


def ttft(llm, prompt, max_tokens=1):
    from inference.engine import SamplingParams

    start = time.perf_counter()
    first, last = None, None
    tokens = []
    for event in llm.engine.submit(prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)):
        if first is None and event.token_ids:
            first = time.perf_counter() - start
        tokens += event.token_ids
        last = event
    return first, last.usage, tokens


def restart_child(args):
    """Runs in a fresh process: the prompt again, against the SSD tier left by the parent."""
    from inference.engine import LLM

    with LLM(model_path(args.preset), paged_ssd_cache_dir=args.cache_dir, cache_block_size=args.block) as llm:
        t, usage, tokens = ttft(llm, ids(args.prompt, 7))
    print(json.dumps({"ttft": t, "cold": usage.cold_cached_tokens, "hot": usage.hot_cached_tokens,
                      "tokens": tokens}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small model, 1024-token prompt")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", default=str(REPO / "benchmarks" / "out" / "ssd-cache"))
    args = parser.parse_args()
    args.preset = "small" if args.quick else "qwen2.5-0.5b"
    args.prompt = 1024 if args.quick else 4096
    args.block = 256
    if args.child:
        return restart_child(args)

    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load

    from inference.engine import LLM

    path = model_path(args.preset)
    shutil.rmtree(args.cache_dir, ignore_errors=True)
    prompt = ids(args.prompt, 7)
    out = {}

    model, _ = load(str(path))
    model.set_dtype(mx.float32)
    next(generate_step(mx.array(prompt[:64]), model, max_tokens=1))  # warm-up
    start = time.perf_counter()
    next(generate_step(mx.array(prompt), model, max_tokens=1))
    out["mlx-lm"] = time.perf_counter() - start
    del model

    with LLM(path, paged_ssd_cache_dir=args.cache_dir, cache_block_size=args.block) as llm:
        ttft(llm, ids(64, 1))  # warm-up
        out["cold"], _, reference = ttft(llm, prompt)
        out["hot"], usage, tokens = ttft(llm, prompt)
        assert tokens == reference and usage.hot_cached_tokens == args.prompt - 1, usage
        llm.engine.call(lambda e: e.prefix_cache.flush_hot())
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
        out["cold-hit"], usage, tokens = ttft(llm, prompt)
        assert tokens == reference and usage.cold_cached_tokens == args.prompt - 1, usage

    child = subprocess.run([sys.executable, __file__, "--child", "--cache-dir", args.cache_dir]
                           + (["--quick"] if args.quick else []),
                           capture_output=True, text=True, check=True)
    restart = json.loads(child.stdout.strip().splitlines()[-1])
    assert restart["tokens"] == reference and restart["cold"] == args.prompt - 1, restart
    out["restart"] = restart["ttft"]

    conversation = []
    with LLM(path, cache_block_size=args.block) as llm:
        history = ids(1000, 11)
        for turn in range(8):
            history = history + ids(200, 100 + turn)
            t, usage, answer = ttft(llm, history, max_tokens=16)
            conversation.append({"turn": turn + 1, "prompt": usage.prompt_tokens, "cached": usage.cached_tokens,
                                 "computed": usage.computed_prompt_tokens, "ttft": t})
            history = history + answer
    out["conversation"] = conversation

    cold = out["cold"]
    print(f"model {args.preset}, {args.prompt}-token prompt, block size {args.block}")
    print("| case | time to first token / cold |")
    print("|---|---|")
    for case in ("cold", "hot", "cold-hit", "restart", "mlx-lm"):
        print(f"| {case} | {out[case] / cold:.4f} |")
    print("\n| turn | prompt tokens | from cache | computed | TTFT / turn-1 TTFT |")
    print("|---|---|---|---|---|")
    for row in conversation:
        print(f"| {row['turn']} | {row['prompt']} | {row['cached']} | {row['computed']} | "
              f"{row['ttft'] / conversation[0]['ttft']:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
