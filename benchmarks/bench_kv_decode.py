"""Decode speed with quantized KV (``--kv-bits``) against float KV, side by side in one run.

R rows (default 4) decode together over C tokens of context each (default 4,096), as the
engine's decode batch does: SmolLM2-135M-Instruct in float32 (the tests' import dequantized,
``bench_kv_quant.smollm2_float``), each layer's batch cache filled with the same random keys and
values (decode speed does not depend on their values), stored as float (``BatchKVCache``) or
quantized (omlx's ``BatchQuantizedKVCache``, the cache a ``--kv-bits`` engine decodes with). On
this thread omlx's CPU attention is set up as the engine's thread sets it up
(inference.engine.cpu_attention: float KV takes it, quantized KV takes mlx-lm's quantized
attention). Each round times S decode steps of every format (order rotating), then trims the
caches back; the ratio is the median of per-round ratios of seconds per step (below 1: faster
than float KV).

    .venv/bin/python benchmarks/bench_kv_decode.py [--rows 4] [--context 4096] [--steps 8]
                                                   [--rounds 3] [--bits 8 4] [--group-size 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)
import mlx.core as mx  # noqa: E402

from benchmarks.bench_kv_quant import smollm2_float  # noqa: E402
from benchmarks.rounds import order  # noqa: E402


def caches(model, rows: int, context: int, bits, group_size: int) -> list:
    """One batch cache per layer holding ``context`` random tokens per row."""
    from mlx_lm.models.cache import BatchKVCache

    from inference.engine.quantized_kv import BatchQuantizedKVCache

    args = model.args
    kv_heads = args.num_key_value_heads
    head_dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    out = []
    for layer in range(len(model.layers)):
        key = mx.random.key(layer)
        k1, k2 = mx.random.split(key)
        keys = mx.random.normal((rows, kv_heads, context, head_dim), key=k1)
        values = mx.random.normal((rows, kv_heads, context, head_dim), key=k2)
        c = BatchKVCache([0] * rows) if bits is None else BatchQuantizedKVCache([0] * rows, group_size, bits)
        c.update_and_fetch(keys, values)
        out.append(c)
    mx.eval([a for c in out for a in (c.state[0] if bits is None else c.keys + c.values)])
    return out


def decode(model, cache, rows: int, steps: int) -> float:
    """Seconds per decode step over ``steps`` steps; the caches are trimmed back afterwards."""
    tokens = mx.zeros((rows, 1), dtype=mx.uint32)
    mx.eval(model(tokens, cache=cache))  # warm: the step's graph and buffers
    for c in cache:
        c.trim(1)
    began = time.perf_counter()
    for _ in range(steps):
        logits = model(tokens, cache=cache)[:, -1, :]
        tokens = mx.argmax(logits, axis=-1).astype(mx.uint32)[:, None]
        mx.eval(tokens)
    seconds = (time.perf_counter() - began) / steps
    for c in cache:
        c.trim(steps)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bits", type=int, nargs="+", default=[8])
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--smollm2", default=None, help="the tests' SmolLM2 import (default: found)")
    args = parser.parse_args()

    from inference.engine import cpu_attention
    from inference.engine.model_loader import load_model

    model = load_model(smollm2_float(args.smollm2), "float32").model
    cpu = cpu_attention.setup(model)
    formats = {"float": None, **{f"{b}-bit": b for b in args.bits}}
    held = {name: caches(model, args.rows, args.context, b, args.group_size) for name, b in formats.items()}
    times = {name: [] for name in formats}
    for r in range(args.rounds):
        for name in order(list(formats), r):
            times[name].append(decode(model, held[name], args.rows, args.steps))
        steps = ", ".join(f"{n} {times[n][-1] * 1000:.0f} ms/step" for n in formats)
        print(f"round {r + 1}: {steps}", flush=True)

    print(
        f"\n{args.rows} rows x {args.context:,} tokens of context, {args.steps} steps a round, "
        f"{args.rounds} rounds; omlx CPU attention: {cpu}\n"
    )
    print("| KV | ms per step (median round) | tokens/s | time vs float KV | per-round ratios |")
    print("|---|---:|---:|---:|---|")
    for name in formats:
        ratios = [t / f for t, f in zip(times[name], times["float"])]
        step = statistics.median(times[name])
        print(
            f"| {name} | {step * 1000:.0f} | {args.rows / step:.1f} | {statistics.median(ratios):.2f}x | "
            + " ".join(f"{x:.2f}" for x in ratios)
            + " |"
        )


if __name__ == "__main__":
    main()
