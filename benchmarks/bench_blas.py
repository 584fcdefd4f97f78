"""Linux CPU: matmul and prefill speed per BLAS library and dtype, side by side in one run.

Each BLAS configuration runs in its own interpreter, because MLX binds its BLAS when mlx.core is
first imported: "reference" is the stock mlx[cpu] wheel (OMLX_BLAS=reference), "openblas" is omlx's
default (inference.platform preloads OpenBLAS). Within each: float32, bfloat16 and float16.

Shapes are those of a Qwen2.5-0.5B-shaped model (hidden 896, intermediate 4864, vocab 151936,
14 heads, 2 KV heads of 64): prefill products over 512 tokens, decode products for 1 and 16
sequences. Weights are (out, in) and used as x @ w.T, as mlx.nn.Linear does. The model rows are
prefill throughput over one prompt through real mlx-lm models with random weights (all layers
over all tokens, logits of the last token): inference.model_factory's "small" qwen2 preset (when
that module exists) and the Qwen2.5-0.5B geometry cut to 2 layers.

Prints absolute figures and ratios to stock mlx-cpu float32.

    .venv/bin/python benchmarks/bench_blas.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform as stdlib_platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent

CONFIGS = {"reference": {"OMLX_BLAS": "reference"}, "openblas": {"OMLX_BLAS": "auto"}}
DTYPES = ("float32", "bfloat16", "float16")
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


def time_call(fn, min_time: float) -> float:
    """Seconds per call: the fastest of the repeats filling min_time after one warm-up call (other
    load on the machine only ever slows a call down); a call that alone takes min_time is its own
    sample, so the slowest cells run once."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first >= min_time:
        return first
    samples, spent = [], 0.0
    while spent < min_time or len(samples) < 3:
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
        spent += samples[-1]
    return min(samples)


def worker(args) -> None:
    """Measure every shape and model in one dtype; print one JSON record per line."""
    sys.path.insert(0, str(REPO))
    from inference import platform  # before mlx: this is what picks the BLAS

    import mlx.core as mx

    emit({"kind": "info", **platform.describe()})
    dtype = getattr(mx, args.dtype)
    for name, m, k, n in QUICK_SHAPES if args.quick else SHAPES:
        x = mx.random.normal((m, k)).astype(dtype)
        w = (mx.random.normal((n, k)) * k**-0.5).astype(dtype)
        mx.eval(x, w)
        seconds = time_call(lambda: mx.eval(x @ w.T), args.min_time)
        emit({"kind": "matmul", "name": f"{name} ({m}x{k} @ {k}x{n})",
              "value": 2 * m * k * n / seconds / 1e9})
    tokens = 128 if args.quick else 512
    for label, build in models(args):
        seconds = prefill(build(), dtype, tokens, args.min_time)
        emit({"kind": "model", "name": f"prefill tokens/s: {label}, {tokens} tokens",
              "value": tokens / seconds})


def models(args):
    """(label, builder) of the models to prefill: model_factory's "small" preset when the parent
    built it, and the Qwen2.5-0.5B geometry cut to a few layers (bare mlx-lm, random init)."""
    from mlx_lm.models import qwen2
    from mlx_lm.utils import load_model

    found = []
    if args.small_model:
        found.append(("model_factory qwen2 'small'",
                      lambda: load_model(Path(args.small_model))[0]))
    layers = 1 if args.quick else 2
    config = qwen2.ModelArgs(
        model_type="qwen2", hidden_size=HIDDEN, num_hidden_layers=layers,
        intermediate_size=INTERMEDIATE, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        rms_norm_eps=1e-6, vocab_size=VOCAB, tie_word_embeddings=True,
    )
    found.append((f"Qwen2.5-0.5B geometry, {layers} of 24 layers", lambda: qwen2.Model(config)))
    return found


def prefill(model, dtype, tokens: int, min_time: float) -> float:
    """Seconds for one prefill of a fresh prompt in `dtype`: every layer over every token, then
    the logits of the last token only (logits for every position are work no server does)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model.set_dtype(dtype)
    mx.eval(model.parameters())
    prompt = mx.random.randint(0, model.args.vocab_size, (1, tokens))
    head = getattr(model, "lm_head", None) or model.model.embed_tokens.as_linear

    def run(length=tokens):
        cache = make_prompt_cache(model)
        hidden = model.model(prompt[:, :length], cache=cache)
        mx.eval(head(hidden[:, -1:]), [c.state for c in cache])

    run(16)  # warm-up: allocations, without paying for a whole slow prefill
    return time_call(run, min_time)


def build_small_model() -> Optional[str]:
    """Write model_factory's "small" qwen2 folder once, for every worker; None if the module is
    not there."""
    sys.path.insert(0, str(REPO))
    try:
        from inference.model_factory import build_model
    except ImportError:
        return None
    folder = Path(tempfile.mkdtemp(prefix="bench_blas_")) / "qwen2-small"
    return str(build_model(folder, "qwen2", "small"))


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def run_worker(config: str, dtype: str, args) -> list[dict]:
    """One fresh interpreter per (BLAS, dtype) cell, so no cell inherits another's state."""
    env = {**os.environ, **CONFIGS[config]}
    cmd = [sys.executable, __file__, "--worker", dtype, "--min-time", str(args.min_time)]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--small-model", args.small_model] if args.small_model else []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, cwd=REPO)
    records = []
    for line in proc.stdout:
        record = {**json.loads(line), "config": config, "dtype": dtype}
        records.append(record)
        if record["kind"] != "info":
            print(f"  {time.perf_counter() - args.started:5.0f}s {config:9} {dtype:8} "
                  f"{record['name']}: {record['value']:.2f}", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        sys.exit(f"worker for {config} {dtype} failed")
    return records


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


def print_tables(records: list[dict], args) -> None:
    infos = {r["config"]: r for r in records if r["kind"] == "info"}
    columns = [(c, d) for c in CONFIGS for d in DTYPES]
    values = {}
    for r in records:
        if "value" in r:
            key = (r["name"], r["config"], r["dtype"])
            values[key] = max(values.get(key, 0.0), r["value"])
    rows = list(dict.fromkeys(r["name"] for r in records if "value" in r))
    versions = mlx_versions()
    print(f"\n{datetime.date.today()} | {machine()} | {versions}")
    for config, info in infos.items():
        print(f"- {config}: backend {info['backend']}, BLAS {info['blas']}")
    flags = " --quick" if args.quick else ""
    flags += f" --rounds {args.rounds}" if args.rounds > 1 else ""
    print(f"- command: .venv/bin/python benchmarks/bench_blas.py{flags}")
    header = "| | " + " | ".join(f"{c} {d}" for c, d in columns) + " |"
    rule = "|---|" + "---:|" * len(columns)
    for title, fmt in (("absolute (matmul: GFLOP/s; model: tokens/s)", "{:.1f}"),
                       ("ratio to stock mlx-cpu float32 (reference BLAS)", "{:.2f}x")):
        print(f"\n{title}\n\n{header}\n{rule}")
        for row in rows:
            base = values.get((row, *BASELINE))
            cells = []
            for c, d in columns:
                v = values.get((row, c, d))
                if v is None:
                    cells.append("-")
                elif fmt.endswith("x"):
                    cells.append(fmt.format(v / base) if base else "-")
                else:
                    cells.append(fmt.format(v))
            print(f"| {row} | " + " | ".join(cells) + " |")


def mlx_versions() -> str:
    import importlib.metadata as md

    parts = []
    for name in ("mlx", "mlx-lm"):
        try:
            parts.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller shapes")
    parser.add_argument("--min-time", type=float, default=None,
                        help="seconds of repeats per measurement (default 0.5, quick 0.3)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the whole comparison; each cell keeps its best round")
    parser.add_argument("--worker", choices=DTYPES, dest="dtype", help=argparse.SUPPRESS)
    parser.add_argument("--small-model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.min_time is None:
        args.min_time = 0.3 if args.quick else 0.5
    if args.dtype:
        worker(args)
        return
    if not sys.platform.startswith("linux"):
        sys.exit("bench_blas compares BLAS libraries for MLX's Linux CPU backend only")
    args.started = time.perf_counter()
    args.small_model = build_small_model()
    records = []
    try:
        # Configurations alternate within each dtype, so that the compared cells run back to back;
        # each round repeats the lot, and the table keeps each cell's best round.
        for _ in range(args.rounds):
            for dtype in DTYPES:
                for config in CONFIGS:
                    records += run_worker(config, dtype, args)
    finally:
        if args.small_model:
            shutil.rmtree(Path(args.small_model).parent, ignore_errors=True)
    if not any(r["kind"] == "info" and "openblas" in r["blas"] for r in records):
        print("\nnote: no OpenBLAS was loaded (apt-get install libopenblas0-pthread)",
              file=sys.stderr)
    print_tables(records, args)


if __name__ == "__main__":
    main()
