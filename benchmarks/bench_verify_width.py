"""What a verify pass of W positions per row costs against a one-token decode step, over a long
context, on the float32 SmolLM2 copy of bench_speculative (issue 27): the figure behind the
verify width rule (inference/engine/speculative/width.py). For each batch size B, a context of
``--context`` tokens is prefilled into mlx-lm batch caches, then passes of [B, W] are timed in
alternating rounds (each trimmed back after), with the engine's CPU attention where it applies.
Prints the median seconds and the ratio to W = 1.

    PYTHONPATH=. OMLX_HOME=/tmp/omlx-shared-smollm2 .venv/bin/python benchmarks/bench_verify_width.py \
        --context 3072 --batch 1 --batch 16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import inference  # noqa: E402,F401  (fast BLAS before mlx)
import mlx.core as mx  # noqa: E402
from mlx_lm import load  # noqa: E402
from mlx_lm.models.cache import BatchKVCache  # noqa: E402

import bench_speculative  # noqa: E402
from inference.engine import cpu_attention  # noqa: E402

WIDTHS = (1, 2, 3, 5, 9, 17)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=3072, help="tokens (whole chunks of 512)")
    parser.add_argument("--batch", type=int, action="append", help="rows (default 1 and 16)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    model, _ = load(str(bench_speculative.float32_copy(bench_speculative.smollm2_folder())))
    print(f"CPU attention: {cpu_attention.setup(model)}", flush=True)
    for rows in args.batch or [1, 16]:
        cache = [BatchKVCache([0] * rows) for _ in model.layers]
        chunk = mx.array([[5] * 512] * rows, dtype=mx.uint32)
        for _ in range(args.context // 512):
            mx.eval(model(chunk, cache=cache))
        seconds = {w: [] for w in WIDTHS}
        for _ in range(args.rounds):
            for width in WIDTHS:
                start = time.perf_counter()
                logits = model(mx.array([[7] * width] * rows, dtype=mx.uint32), cache=cache)
                mx.eval(mx.argmax(logits, axis=-1))
                seconds[width].append(time.perf_counter() - start)
                for c in cache:
                    c.trim(width)
        one = statistics.median(seconds[1])
        cells = [
            f"W={w} {statistics.median(s) * 1000:.0f} ms ({statistics.median(s) / one:.2f}x)"
            for w, s in seconds.items()
        ]
        print(f"B={rows} context={args.context // 512 * 512}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
