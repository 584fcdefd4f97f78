"""Where a decode step of pipeline parallel goes on loopback (issue 29): one process, two
pipeline ranks and two tensor ranks of MLX's ring backend, side by side in one run.

Each configuration prefills a 32-token prompt and then times S greedy decode steps of one row
(after a warm-up): wall seconds, CPU seconds of the process (so how many cores it kept busy)
and, for the pipeline ranks, the phases of their passes, measured by evaluating each phase on
its own (which adds a few evaluations to the pass; the totals are what matters):

- ``wait``: a rank > 0 waiting for the hidden state of the rank before it (``recv``);
- ``layers``: the rank computing its own slice of the layers (the embedding too);
- ``hand on``: sending the hidden state on and gathering the last rank's (for rank 0, this is
  where it waits for the ranks after it);
- ``head``: the final norm, the LM head and the argmax, on every rank.

The model is bench_tensor_parallel.py's (the testkit's llama widened, 8 layers, float32).

    .venv/bin/python benchmarks/bench_pipeline_phases.py [--steps 24] [--port 18560]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

PHASES = ("wait", "layers", "hand on", "head")


def rank_main(args) -> int:
    import inference  # noqa: F401  (fast BLAS before mlx)
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from inference.distributed import pipeline
    from inference.distributed.tensor import sharder
    from inference.engine.model_loader import load_model

    group = mx.distributed.init()
    parts = []
    shard = sharder(args.rank, group, parts) if group.size() > 1 else None
    model = load_model(args.model, "float32", shard=shard).model
    phases = dict.fromkeys(PHASES, 0.0)

    def timed(phase, arrays):
        start = time.perf_counter()
        mx.eval(arrays)
        phases[phase] += time.perf_counter() - start

    def stage_call(self, x, *a, **kw):  # pipeline._Stage.__call__, each phase evaluated apart
        stage, g = self._stage, self._stage_group
        if self._stage_receives:
            x = mx.distributed.recv_like(x, stage.rank - 1, group=g)
            timed("wait", x)
        out = super(pipeline._Stage, self).__call__(x, *a, **kw)
        if not self._stage_sends:
            return out
        timed("layers", out)
        if not stage.last:
            out = mx.distributed.send(out, stage.rank + 1, group=g)
        rows = out.shape[0]
        final = mx.distributed.all_gather(out, group=g)[(stage.size - 1) * rows : stage.size * rows]
        timed("hand on", final)
        return final

    for layer in getattr(getattr(model, "model", None), "layers", []):
        if isinstance(layer, pipeline._Stage):
            type(layer).__call__ = stage_call
    prompt = mx.array([[(7 * i) % 1000 + 1 for i in range(32)]])

    def run(steps):
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache))
        token = mx.ones((1, 1), dtype=mx.int32)
        for _ in range(steps):
            logits = model(token, cache=cache)
            token = mx.argmax(logits[:, -1:], axis=-1)
            timed("head", token)

    run(4)  # warm-up
    for k in phases:
        phases[k] = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    run(args.steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = {"rank": group.rank(), "wall": wall, "cpu": cpu, **phases}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def launch(args, parallel, port: int) -> list:
    argv = [sys.executable, __file__, "--rank", parallel or "pipeline", "--model", str(args.model)]
    argv += ["--steps", str(args.steps)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    ranks = 1 if parallel is None else 2
    if ranks > 1:
        hostfile = Path(args.work) / f"ring-phases-{parallel}.json"
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
    return [json.loads(next(x for x in o.splitlines() if x.startswith("RESULT "))[7:]) for o in outs]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model folder (default: bench_tensor_parallel's)")
    parser.add_argument("--work", default="/tmp/omlx-bench-tp", help="where the default model is built")
    parser.add_argument("--steps", type=int, default=24, help="decode steps timed")
    parser.add_argument("--port", type=int, default=18560, help="first ring port (two per run)")
    parser.add_argument("--rank", choices=("pipeline", "tensor"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        return rank_main(args)
    import bench_tensor_parallel

    Path(args.work).mkdir(parents=True, exist_ok=True)
    args.model = Path(args.model) if args.model else bench_tensor_parallel.default_model(Path(args.work))
    print(f"{args.steps} decode steps of one row, ms per step; cores: CPU seconds / wall seconds")
    print(f"{'':22} {'wall':>6} {'cores':>6} " + " ".join(f"{p:>8}" for p in PHASES))
    configs = [("one process", None), ("pipeline", "pipeline"), ("tensor", "tensor")]
    for i, (name, parallel) in enumerate(configs):
        for r in launch(args, parallel, args.port + 2 * i):
            per = lambda s: 1000 * s / args.steps  # noqa: E731
            cells = " ".join(f"{per(r[p]):8.1f}" if parallel == "pipeline" else f"{'':>8}" for p in PHASES)
            label = name if parallel is None else f"{name}, rank {r['rank']}"
            print(f"{label:22} {per(r['wall']):6.1f} {r['cpu'] / r['wall']:6.2f} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
