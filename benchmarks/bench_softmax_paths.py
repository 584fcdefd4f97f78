"""MLX's softmax against cpu_numpy's NumPy path on this machine, by the number of scores
(``cpu_numpy.SOFTMAX_MIN`` is set where they measure even): 30 layers of a decode step's
attention core (``q @ k^T``, softmax, ``@ v``; 3 key/value heads of 64, as SmolLM2's) evaluated
once, the median of 31 runs, per layer. Context lengths x rows of queries (3 query heads a
key/value head: rows 3 is one token, 6 two, 15 a verify pass of 5).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_softmax_paths.py
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import inference  # noqa: F401,E402  (fast BLAS before mlx)
import mlx.core as mx  # noqa: E402

from inference.engine import cpu_numpy  # noqa: E402

LAYERS = 30


def per_layer(fn, runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) / LAYERS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="128,512,1024,2048,3100,6000")
    parser.add_argument("--rows", default="3,6,15")
    parser.add_argument("--runs", type=int, default=31)
    args = parser.parse_args()
    kept = cpu_numpy.SOFTMAX_MIN
    print(f"{'context':>8} {'rows':>5} {'scores':>8} {'MLX us':>8} {'NumPy us':>9} {'NumPy / MLX':>12}")
    for context in map(int, args.contexts.split(",")):
        for rows in map(int, args.rows.split(",")):
            shape = (1, 3, context, 64)
            q = mx.random.normal((1, 3, rows, 64))
            k, v = mx.random.normal(shape), mx.random.normal(shape)
            mx.eval(q, k, v)
            measured = {}
            for name, threshold in (("mlx", 1 << 40), ("numpy", 0)):
                cpu_numpy.SOFTMAX_MIN = threshold

                def chain():
                    h = q
                    for _ in range(LAYERS):
                        h = (cpu_numpy.softmax(h @ k.swapaxes(-1, -2) * 0.125) @ v) * 0.1
                    mx.eval(h)

                measured[name] = per_layer(chain, args.runs)
            ratio = measured["numpy"] / measured["mlx"]
            scores = 3 * rows * context
            mlx_us, numpy_us = measured["mlx"], measured["numpy"]
            print(f"{context:>8} {rows:>5} {scores:>8} {mlx_us:>8.0f} {numpy_us:>9.0f} {ratio:>11.2f}x")
    cpu_numpy.SOFTMAX_MIN = kept


if __name__ == "__main__":
    main()
