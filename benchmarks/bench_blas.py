"""Linux CPU: matmul and prefill speed per BLAS library and dtype, side by side in one run.

Each BLAS configuration runs in its own interpreter, because MLX binds its BLAS when mlx.core is
first imported: "reference" is the stock mlx[cpu] wheel (OMLX_BLAS=reference), "openblas" is omlx's
default (inference.platform preloads OpenBLAS). Six cells, one worker process each: the two
configurations in float32, bfloat16 and float16, all alive at once.

Shapes are those of a Qwen2.5-0.5B-shaped model (hidden 896, intermediate 4864, vocab 151936,
14 heads, 2 KV heads of 64): prefill products over 512 tokens, decode products for 1 and 16
sequences. Weights are (out, in) and used as x @ w.T, as mlx.nn.Linear does. The model rows are
prefill throughput over one prompt through real mlx-lm models with random weights (all layers
over all tokens, logits of the last token): inference.testkit's "small" qwen2 preset and
the Qwen2.5-0.5B geometry cut to 2 layers.

Every cell is timed the same way (``measure``): one untimed warm-up call, then ``--rounds``
samples, each the mean of k back-to-back calls, where k is one number for the whole row (chosen
from the row's fastest warm-up so a fast cell's sample lasts about ``--sample-time``; slow cells
then take longer per sample, never fewer calls); the cell's figure is the median of its samples.
Within a round the six cells take turns, one sample each, the order rotating between rounds, with
a short pause before each sample (idle OpenBLAS threads spin for a while after a call). A ratio
is the median over rounds of (that round's stock float32 seconds / the cell's seconds), as
benchmarks/rounds.py states every ratio.

    .venv/bin/python benchmarks/bench_blas.py [--quick] [--rounds 5] [--sample-time 0.05]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform as stdlib_platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.rounds import Comparison, order  # noqa: E402

CONFIGS = {"reference": {"OMLX_BLAS": "reference"}, "openblas": {"OMLX_BLAS": "auto"}}
DTYPES = ("float32", "bfloat16", "float16")
CELLS = [(c, d) for c in CONFIGS for d in DTYPES]
BASELINE = ("reference", "float32")

HIDDEN, INTERMEDIATE, VOCAB, HEADS, KV_HEADS, HEAD_DIM = 896, 4864, 151936, 14, 2, 64
QKV = (HEADS + 2 * KV_HEADS) * HEAD_DIM

# (name, M, K, N): x is M x K, the weight N x K.
SHAPES = [
    ("prefill qkv_proj", 512, HIDDEN, QKV),
    ("prefill mlp up", 512, HIDDEN, INTERMEDIATE),
    ("prefill mlp down", 512, INTERMEDIATE, HIDDEN),
    ("decode mlp up, 1 seq", 1, HIDDEN, INTERMEDIATE),
    ("decode mlp up, 16 seqs", 16, HIDDEN, INTERMEDIATE),
    ("decode lm_head, 1 seq", 1, HIDDEN, VOCAB),
    ("decode lm_head, 16 seqs", 16, HIDDEN, VOCAB),
]
QUICK_SHAPES = [("prefill mlp up", 128, HIDDEN, INTERMEDIATE), SHAPES[3], SHAPES[4]]


# -- timing: the same for every cell ------------------------------------------------------------


def calls_per_sample(warmups: Sequence[float], sample_time: float) -> int:
    """k for a row: enough calls that the fastest cell's sample lasts about sample_time."""
    fastest = max(min(warmups), 1e-9)
    return max(1, math.ceil(sample_time / fastest))


def sample(fn: Callable[[], None], calls: int) -> float:
    """Seconds per call: the mean of ``calls`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(
    cells: Dict[object, "Cell"], rounds: int, sample_time: float, gap: float = 0.0
) -> Dict[object, List[float]]:
    """One row over every cell: each cell warms up once (untimed but for choosing k), then
    ``rounds`` rounds in which every cell takes one sample of k calls, the order rotating.
    Returns cell -> seconds per call of each round (the same count for every cell)."""
    warmups = {key: cell.warm_up() for key, cell in cells.items()}
    k = calls_per_sample(list(warmups.values()), sample_time)
    seconds = {key: [] for key in cells}
    for r in range(rounds):
        for key in order(list(cells), r):
            if gap:
                time.sleep(gap)
            seconds[key].append(cells[key].sample(k))
    return seconds


def speed_ratio(seconds: Dict[object, List[float]], cell, baseline=BASELINE) -> Optional[float]:
    """The median over rounds of baseline seconds / cell seconds (above 1: the cell is faster)."""
    c = Comparison(str(cell), invert=True)
    for ours, theirs in zip(seconds[cell], seconds[baseline]):
        c.add(ours, theirs)
    return c.ratio


class Cell:
    """A cell measured in this process: ``fn`` is one call of the measured work."""

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def warm_up(self) -> float:
        return sample(self.fn, 1)

    def sample(self, calls: int) -> float:
        return sample(self.fn, calls)


# -- the worker: one (BLAS, dtype) cell in its own interpreter ---------------------------------


def rows(quick: bool, small_model: Optional[str]) -> List[tuple]:
    """(name, work units per call, unit) of every row, in the order measured."""
    out = [
        (f"{name} ({m}x{k} @ {k}x{n})", 2 * m * k * n / 1e9, "GFLOP/s")
        for name, m, k, n in (QUICK_SHAPES if quick else SHAPES)
    ]
    tokens = 128 if quick else 512
    if small_model:
        out.append((f"prefill tokens/s: model_factory qwen2 'small', {tokens} tokens", tokens, "tokens/s"))
    layers = 1 if quick else 2
    out.append(
        (
            f"prefill tokens/s: Qwen2.5-0.5B geometry, {layers} of 24 layers, {tokens} tokens",
            tokens,
            "tokens/s",
        )
    )
    return out


def build_call(index: int, args) -> Callable[[], None]:
    """One call of row ``index``'s work in this worker's dtype, its data already evaluated."""
    import mlx.core as mx

    dtype = getattr(mx, args.dtype)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if index < len(shapes):
        _, m, k, n = shapes[index]
        x = mx.random.normal((m, k)).astype(dtype)
        w = (mx.random.normal((n, k)) * k**-0.5).astype(dtype)
        mx.eval(x, w)
        return lambda: mx.eval(x @ w.T)
    models = model_builders(args)
    return prefill_call(models[index - len(shapes)](), dtype, 128 if args.quick else 512)


def model_builders(args) -> list:
    from mlx_lm.models import qwen2
    from mlx_lm.utils import load_model

    found = []
    if args.small_model:
        found.append(lambda: load_model(Path(args.small_model))[0])
    config = qwen2.ModelArgs(
        model_type="qwen2",
        hidden_size=HIDDEN,
        num_hidden_layers=1 if args.quick else 2,
        intermediate_size=INTERMEDIATE,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        rms_norm_eps=1e-6,
        vocab_size=VOCAB,
        tie_word_embeddings=True,
    )
    found.append(lambda: qwen2.Model(config))
    return found


def prefill_call(model, dtype, tokens: int) -> Callable[[], None]:
    """One prefill of a fresh prompt in `dtype`: every layer over every token, then the logits of
    the last token only (logits for every position are work no server does)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model.set_dtype(dtype)
    mx.eval(model.parameters())
    prompt = mx.random.randint(0, model.args.vocab_size, (1, tokens))
    head = getattr(model, "lm_head", None) or model.model.embed_tokens.as_linear

    def run():
        cache = make_prompt_cache(model)
        hidden = model.model(prompt, cache=cache)
        mx.eval(head(hidden[:, -1:]), [c.state for c in cache])

    return run


def worker(args) -> None:
    """Serve the driver over stdin/stdout, one JSON line each way: {"row": i} builds row i and
    warms it up, {"calls": k} takes one sample, {"release": true} frees the row."""
    from inference import platform  # before mlx: this is what picks the BLAS

    emit(platform.describe())
    cell = None
    for line in sys.stdin:
        command = json.loads(line)
        if "row" in command:
            cell = Cell(build_call(command["row"], args))
            emit({"seconds": cell.warm_up()})
        elif "calls" in command:
            emit({"seconds": cell.sample(command["calls"])})
        else:
            cell = None
            import gc

            gc.collect()
            emit({})


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


class WorkerCell:
    """The driver's end of one worker process; the same warm_up/sample as Cell."""

    def __init__(self, config: str, dtype: str, args):
        cmd = [sys.executable, __file__, "--worker", dtype] + (["--quick"] if args.quick else [])
        cmd += ["--small-model", args.small_model] if args.small_model else []
        self.proc = subprocess.Popen(
            cmd,
            env={**os.environ, **CONFIGS[config]},
            cwd=REPO,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.row = None
        self.info = self._read()

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        sys.exit(f"a bench_blas worker exited with {self.proc.wait()}")

    def _ask(self, command: dict) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def warm_up(self) -> float:
        return self._ask({"row": self.row})["seconds"]

    def sample(self, calls: int) -> float:
        return self._ask({"calls": calls})["seconds"]

    def release(self) -> None:
        self._ask({"release": True})

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


# -- the driver ---------------------------------------------------------------------------------


def build_small_model() -> str:
    """Write the testkit's "small" qwen2 folder once, for every worker."""
    from inference.testkit.registry import build_model

    folder = Path(tempfile.mkdtemp(prefix="bench_blas_")) / "qwen2-small"
    return str(build_model(folder, "qwen2", "small"))


def machine() -> str:
    flags = ""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        flags = next(line for line in cpuinfo.splitlines() if line.startswith("flags")).split()
        model = next(line for line in cpuinfo.splitlines() if line.startswith("model name"))
        model = model.split(":", 1)[1].strip()
    except (OSError, StopIteration):
        model = stdlib_platform.processor() or stdlib_platform.machine()
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model}, {os.cpu_count()} cores, {simd}"


def mlx_versions() -> str:
    import importlib.metadata as md

    parts = []
    for name in ("mlx", "mlx-lm"):
        try:
            parts.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(parts)


def print_tables(results: Dict[str, tuple], infos: dict, args) -> None:
    """results: row name -> (work per call, unit, cell -> seconds per round)."""
    print(f"\n{datetime.date.today()} | {machine()} | {mlx_versions()}")
    for config, info in infos.items():
        print(f"- {config}: backend {info['backend']}, BLAS {info['blas']}")
    flags = " --quick" if args.quick else ""
    print(
        f"- command: .venv/bin/python benchmarks/bench_blas.py{flags} --rounds {args.rounds} "
        f"--sample-time {args.sample_time}"
    )
    header = "| | " + " | ".join(f"{c} {d}" for c, d in CELLS) + " |"
    rule = "|---|" + "---:|" * len(CELLS)
    print(
        f"\nabsolute (matmul: GFLOP/s; model: tokens/s), work / median seconds of {args.rounds} rounds"
        f"\n\n{header}\n{rule}"
    )
    for name, (work, _, seconds) in results.items():
        print(
            f"| {name} | " + " | ".join(f"{work / statistics.median(seconds[c]):.1f}" for c in CELLS) + " |"
        )
    print(
        f"\nratio to stock mlx-cpu float32 (reference BLAS), median of {args.rounds} per-round ratios; "
        f"above 1 is faster\n\n{header}\n{rule}"
    )
    for name, (_, _, seconds) in results.items():
        print(f"| {name} | " + " | ".join(f"{speed_ratio(seconds, c):.2f}x" for c in CELLS) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller shapes and models")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="samples per cell, the cells interleaved (default 5, quick 3)",
    )
    parser.add_argument(
        "--sample-time",
        type=float,
        default=0.05,
        help="seconds a sample of a row's fastest cell lasts (default 0.05)",
    )
    parser.add_argument(
        "--gap", type=float, default=0.2, help="pause before each sample, seconds (default 0.2)"
    )
    parser.add_argument("--json", help="also write every sample here")
    parser.add_argument("--worker", choices=DTYPES, dest="dtype", help=argparse.SUPPRESS)
    parser.add_argument("--small-model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dtype:
        worker(args)
        return
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if not sys.platform.startswith("linux"):
        sys.exit("bench_blas compares BLAS libraries for MLX's Linux CPU backend only")
    started = time.perf_counter()
    args.small_model = build_small_model()
    cells = {}
    results = {}
    try:
        cells = {(c, d): WorkerCell(c, d, args) for c, d in CELLS}
        for index, (name, work, unit) in enumerate(rows(args.quick, args.small_model)):
            for cell in cells.values():
                cell.row = index
            seconds = measure(cells, args.rounds, args.sample_time, args.gap)
            for cell in cells.values():
                cell.release()
            results[name] = (work, unit, seconds)
            print(
                f"  {time.perf_counter() - started:5.0f}s {name}: openblas float32 "
                f"{speed_ratio(seconds, ('openblas', 'float32')):.2f}x",
                file=sys.stderr,
                flush=True,
            )
    finally:
        for cell in cells.values():
            cell.close()
        shutil.rmtree(Path(args.small_model).parent, ignore_errors=True)
    infos = {c: cells[(c, "float32")].info for c in CONFIGS}
    if not any("openblas" in str(info.get("blas")) for info in infos.values()):
        print("\nnote: no OpenBLAS was loaded (apt-get install libopenblas0-pthread)", file=sys.stderr)
    print_tables(results, infos, args)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    name: {"work": w, "unit": u, "seconds": {f"{c} {d}": s for (c, d), s in sec.items()}}
                    for name, (w, u, sec) in results.items()
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
