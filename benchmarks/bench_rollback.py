"""What rolling back a verify pass costs, per kind of cache (issue 27; docs/engine.md,
"Speculative decoding"), side by side in one run.

A random-weight model of the test factory (``--arch``, ``--preset``, ``--layers``; or
``--model`` a folder), ``--rows`` rows of ``--context`` random tokens prefilled and merged into
the decode batch's caches. Then, in alternating rounds, each timed with its caches evaluated:

- ``plain``: a decode step, [rows, 1];
- ``verify, all kept``: a verify pass [rows, 1 + k] in which every row keeps its whole draft
  (no rollback work: the cost of the wider pass alone);
- ``verify, rejected``: the same pass where row i keeps i mod (k + 1) drafted tokens, then the
  rollback (``speculative.rollback.Rollback``: trim and roll for attention, cut and roll for
  sliding windows, restore and replay for recurrent state).

Printed: the median seconds of each and their ratios to ``plain``. The contexts grow by a few
tokens a round (negligible next to ``--context``). ``--kv-bits`` 8 or 4: quantized KV (groups of
``--kv-group-size``), sliding windows included (three rings cut and rolled alike).

    .venv/bin/python benchmarks/bench_rollback.py [--arch qwen3_5] [--preset qwen2.5-0.5b]
        [--layers 8] [--rows 4] [--context 512] [--k 4] [--rounds 8] [--kv-bits 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

import mlx.core as mx  # noqa: E402

from inference.engine.cache_io import leaves  # noqa: E402
from inference.engine.head_gate import HeadGate  # noqa: E402
from inference.engine.kv_quant import KVQuant  # noqa: E402
from inference.engine.model_loader import load_model  # noqa: E402
from inference.engine.prefill import Prefill  # noqa: E402
from inference.engine.speculative.rollback import Rollback, cache_arrays, rollback_kind  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a model folder (default: build one)")
    ap.add_argument("--arch", default="qwen3_5")
    ap.add_argument("--preset", default="qwen2.5-0.5b")
    ap.add_argument("--layers", type=int, default=8, help="num_hidden_layers (0: the preset's)")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--kv-bits", type=int, choices=(8, 4), help="quantized KV (default: float)")
    ap.add_argument("--kv-group-size", type=int, default=64)
    args = ap.parse_args()
    kv_quant = KVQuant(args.kv_bits, args.kv_group_size) if args.kv_bits else None
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if path is None:
            from inference.testkit.registry import build_model

            layers = {"num_hidden_layers": args.layers} if args.layers else {}
            path = build_model(Path(tmp) / "model", arch=args.arch, preset=args.preset, **layers)
        run(load_model(path, None, kv_quant), args)


def run(loaded, args) -> None:
    model, rows, k = loaded.model, args.rows, args.k
    padding_ok = Prefill(loaded, HeadGate(model), None).together
    vocab = min(loaded.vocab_size, 1000)
    caches = []
    for i in range(rows):
        cache = loaded.new_cache()
        model(mx.random.randint(0, vocab, (1, args.context), key=mx.random.key(i)), cache=cache)
        caches.append(cache)
    batch = [type(layer[0]).merge(list(layer)) for layer in zip(*caches)]
    mx.eval([a for c in leaves(batch) for a in cache_arrays(c)])
    kv = f"kv {args.kv_bits} bits" if args.kv_bits else "float kv"
    kind = rollback_kind(batch, padding_ok)
    print(f"{type(model).__module__} ({kv}): rollback {kind}, padding_ok {padding_ok}")

    def tokens(width: int):
        return mx.random.randint(0, vocab, (rows, width)).astype(mx.uint32)

    def timed(width: int, remove=None) -> float:
        began = time.perf_counter()
        rollback = Rollback(batch, padding_ok)
        inputs = tokens(width)
        logits = model(inputs, cache=batch)
        mx.eval(logits, [a for c in leaves(batch) for a in cache_arrays(c)])
        if remove is not None:
            rollback.apply(remove, inputs.tolist(), lambda t: model(t, cache=batch))
        return time.perf_counter() - began

    rejected = [i % (k + 1) for i in range(rows)]
    rejected = [k - r for r in rejected]  # positions each row drops (row 0 keeps nothing)
    cases = {
        "plain": lambda: timed(1),
        "verify, all kept": lambda: timed(1 + k, [0] * rows),
        "verify, rejected": lambda: timed(1 + k, rejected),
    }
    for run_once in cases.values():  # warm-up
        run_once()
    times = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, run_once in cases.items():
            times[name].append(run_once())
    plain = statistics.median(times["plain"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:18s} {median * 1000:8.2f} ms  {median / plain:5.2f}x plain")


if __name__ == "__main__":
    main()
