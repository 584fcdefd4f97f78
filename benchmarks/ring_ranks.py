"""Ranks of MLX's ring backend on loopback, for the benchmarks that run one model as one process
and as two ranks (bench_tensor_parallel.py, bench_pipeline_phases.py): their default model, a
rank's model cut for its rank, and starting the processes of one configuration.

A benchmark script is its own rank: ``launch`` starts it again with ``--rank pipeline|tensor``
(``pipeline`` also for the one process, where nothing is cut), and each process that has figures
prints one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The testkit's llama "small" preset widened: about 25 M parameters in the layers, float32.
WIDE = dict(
    hidden_size=512,
    num_attention_heads=8,
    num_key_value_heads=4,
    intermediate_size=1536,
    num_hidden_layers=8,
)


def default_model(work: Path) -> Path:
    """The widened testkit llama, built once into ``work``."""
    from inference.testkit.registry import build_model

    folder = work / "llama-wide-512"
    if not (folder / "config.json").exists():
        build_model(folder, "llama", "small", **WIDE)
    return folder


def add_options(parser: argparse.ArgumentParser, port: int) -> None:
    """The options every such benchmark takes: ``--model``, ``--work``, ``--port`` (the first ring
    port, default ``port``) and the hidden ``--rank`` its own ranks are started with."""
    parser.add_argument("--model", help="a model folder (default: the widened testkit llama)")
    parser.add_argument("--work", default="/tmp/omlx-bench-tp", help="where the default model is built")
    parser.add_argument("--port", type=int, default=port, help="first ring port (two per run)")
    parser.add_argument("--rank", choices=("pipeline", "tensor"), help=argparse.SUPPRESS)


def model_folder(args) -> Path:
    """``--model``, or the default model built into ``--work``."""
    Path(args.work).mkdir(parents=True, exist_ok=True)
    return Path(args.model) if args.model else default_model(Path(args.work))


def rank_model(folder, parallel: str):
    """(group, model) of this process: the ring group (of one where no ranks were launched) and
    the float32 model, cut for this rank by ``parallel`` (``pipeline`` or ``tensor``)."""
    import inference  # noqa: F401  (fast BLAS before mlx)
    import mlx.core as mx

    from inference.distributed.tensor import sharder
    from inference.engine.model_loader import load_model

    group = mx.distributed.init()
    parts = []
    shard = sharder(parallel, group, parts) if group.size() > 1 else None
    return group, load_model(folder, "float32", shard=shard).model


def launch(script, model, options, parallel, port: int, hostfile: Path) -> list:
    """Run ``script --rank ... --model model *options`` as one process (``parallel`` None) or two
    ranks (``pipeline`` or ``tensor``; the ring on ``port`` and ``port + 1``, described in
    ``hostfile``); the first RESULT of each process that printed one, in rank order."""
    argv = [sys.executable, str(script), "--rank", parallel or "pipeline", "--model", str(model), *options]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    ranks = 1 if parallel is None else 2
    if ranks > 1:
        hostfile.write_text(json.dumps([[f"127.0.0.1:{port + r}"] for r in range(ranks)]))
        env["MLX_HOSTFILE"] = str(hostfile)
    procs = [
        subprocess.Popen(
            argv, env=dict(env, MLX_RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in range(ranks)
    ]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{parallel or 'one process'} failed:\n" + "\n".join(outs))
    lines = [next((x for x in out.splitlines() if x.startswith("RESULT ")), None) for out in outs]
    return [json.loads(line[len("RESULT ") :]) for line in lines if line is not None]
