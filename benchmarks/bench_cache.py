"""Time to first token with the block cache, side by side in one run, per model family.

For each family (``--arch``: qwen2 = full attention everywhere, gemma3_text = sliding window + full,
qwen3_5 = Gated DeltaNet + full) a Qwen2.5-0.5B-shaped model with random weights (float32), and for
one long prompt:
  cold      nothing cached: the whole prompt is computed
  hot       the same prompt again: its blocks are in RAM
  cold-hit  after the hot tier was flushed to disk and the files' pages dropped from the OS page
            cache (posix_fadvise DONTNEED): blocks are read from the SSD tier
  restart   in a fresh process, page cache dropped again: the SSD tier found at start-up
  mlx-lm    bare mlx-lm computing the same prompt (reference for the cold case)
each as a ratio to cold (median over ``--rounds`` rounds, each with its own prompt); the bytes the
SSD tier holds per cached token; then a conversation of 8 turns, each appending ~200 new tokens,
reporting per turn the prompt tokens that came from the cache and those that were computed
(at most the new tokens plus one block, for every family).

    .venv/bin/python benchmarks/bench_cache.py [--quick] [--arch qwen2 gemma3_text qwen3_5]
                                               [--rounds 3] [--json FILE]
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

ARCHS = ("qwen2", "gemma3_text", "qwen3_5")


def model_path(arch: str, preset: str) -> Path:
    from inference.testkit.registry import build_model

    path = REPO / "benchmarks" / "out" / "models" / f"{arch}-{preset}"
    if not (path / "config.json").exists():
        print(f"building {arch} {preset} model in {path} ...", flush=True)
        build_model(path, arch=arch, preset=preset, seed=0)
    return path


def ids(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(10, 1000) for _ in range(n)]


def ttft(llm, prompt, max_tokens=1):
    from inference.engine import SamplingParams

    start = time.perf_counter()
    first, last = None, None
    tokens = []
    for event in llm.engine.submit(
        prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    ):
        if first is None and event.token_ids:
            first = time.perf_counter() - start
        tokens += event.token_ids
        last = event
    return first, last.usage, tokens


def drop_page_cache(root: Path) -> int:
    """Drop the SSD tier's files from the OS page cache, so reads come from the disk."""
    from cache.probe import drop_cached

    files = [p for p in Path(root).rglob("*.safetensors")]
    if not all(drop_cached(p) for p in files):
        print("warning: could not drop the page cache; SSD reads may come from memory", flush=True)
    return sum(p.stat().st_size for p in files)


def restart_child(args):
    """Runs in a fresh process: the prompt again, against the SSD tier left by the parent."""
    from inference.engine import LLM

    with LLM(
        model_path(args.arch[0], args.preset), paged_ssd_cache_dir=args.cache_dir, cache_block_size=args.block
    ) as llm:
        t, usage, tokens = ttft(llm, ids(args.prompt, args.seed))
    print(
        json.dumps(
            {"ttft": t, "cold": usage.cold_cached_tokens, "hot": usage.hot_cached_tokens, "tokens": tokens}
        )
    )


def one_round(args, arch, path, seed):
    """cold, hot, cold-hit, restart and mlx-lm times for one prompt; SSD bytes per token."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load

    from inference.engine import LLM

    cache_dir = Path(args.cache_dir) / arch
    shutil.rmtree(cache_dir, ignore_errors=True)
    prompt = ids(args.prompt, seed)
    out = {}
    model, _ = load(str(path))
    model.set_dtype(mx.float32)
    next(generate_step(mx.array(prompt[:64]), model, max_tokens=1))  # warm-up
    start = time.perf_counter()
    next(generate_step(mx.array(prompt), model, max_tokens=1))
    out["mlx-lm"] = time.perf_counter() - start
    del model

    with LLM(path, paged_ssd_cache_dir=str(cache_dir), cache_block_size=args.block) as llm:
        ttft(llm, ids(64, 1))  # warm-up
        out["cold"], _, reference = ttft(llm, prompt)
        out["hot"], usage, tokens = ttft(llm, prompt)
        expected = len(prompt) - 1  # all but the last prompt token
        assert tokens == reference and usage.hot_cached_tokens == expected, usage
        llm.engine.call(lambda e: e.prefix_cache.flush_hot())
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
        ssd_bytes = drop_page_cache(cache_dir)
        out["cold-hit"], usage, tokens = ttft(llm, prompt)
        assert tokens == reference and usage.cold_cached_tokens == expected, usage
        cached_tokens = sum(len(b.token_ids) for b in llm.engine.prefix_cache.hot.blocks())
    out["ssd-bytes-per-token"] = ssd_bytes / max(1, cached_tokens)

    drop_page_cache(cache_dir)
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--cache-dir",
            str(cache_dir),
            "--arch",
            arch,
            "--seed",
            str(seed),
        ]
        + (["--quick"] if args.quick else []),
        capture_output=True,
        text=True,
    )
    if child.returncode:
        raise SystemExit(child.stderr)
    restart = json.loads(child.stdout.strip().splitlines()[-1])
    assert restart["tokens"] == reference and restart["cold"] == expected, restart
    out["restart"] = restart["ttft"]
    return out


def conversation(args, path):
    from inference.engine import LLM

    rows = []
    with LLM(path, cache_block_size=args.block) as llm:
        history = ids(1000, 11)
        for turn in range(8):
            new = ids(200, 100 + turn)
            history = history + new
            t, usage, answer = ttft(llm, history, max_tokens=16)
            rows.append(
                {
                    "turn": turn + 1,
                    "prompt": usage.prompt_tokens,
                    "cached": usage.cached_tokens,
                    "computed": usage.computed_prompt_tokens,
                    "new": len(new),
                    "ttft": t,
                }
            )
            history = history + answer
    return rows


def main():
    import statistics

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny models, 1024-token prompt")
    parser.add_argument("--arch", nargs="+", default=list(ARCHS), choices=ARCHS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", default=str(REPO / "benchmarks" / "out" / "ssd-cache"))
    args = parser.parse_args()
    args.preset = "tiny" if args.quick else "qwen2.5-0.5b"
    args.prompt = 1024 if args.quick else 4096
    args.block = 256
    if args.child:
        return restart_child(args)

    results = {}
    for arch in args.arch:
        path = model_path(arch, args.preset)
        rounds = [one_round(args, arch, path, 7 + r) for r in range(args.rounds)]
        ratios = {
            case: statistics.median(r[case] / r["cold"] for r in rounds)
            for case in ("hot", "cold-hit", "restart", "mlx-lm")
        }
        results[arch] = {
            "rounds": rounds,
            "ratios": ratios,
            "ssd_bytes_per_token": rounds[0]["ssd-bytes-per-token"],
            "conversation": conversation(args, path),
        }

    print(
        f"{args.preset} models, {args.prompt}-token prompt, block size {args.block}, "
        f"median of {args.rounds} rounds (ratio to that round's cold time to first token)"
    )
    print("| family | hot / cold | SSD hit / cold | restart / cold | mlx-lm / cold | SSD bytes per token |")
    print("|---|---|---|---|---|---|")
    for arch, r in results.items():
        q = r["ratios"]
        print(
            f"| {arch} | {q['hot']:.4f} | {q['cold-hit']:.4f} | {q['restart']:.4f} | {q['mlx-lm']:.3f} | "
            f"{r['ssd_bytes_per_token']:,.0f} |"
        )
    print("\n| family | turn | prompt tokens | new | from cache | computed | computed - new |")
    print("|---|---|---|---|---|---|---|")
    for arch, r in results.items():
        for row in r["conversation"]:
            print(
                f"| {arch} | {row['turn']} | {row['prompt']} | {row['new']} | {row['cached']} | "
                f"{row['computed']} | {row['computed'] - row['new']} |"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
