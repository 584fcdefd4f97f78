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

The model is bench_tensor_parallel.py's default (benchmarks/ring_ranks.py: the testkit's llama
widened, 8 layers, float32).

    .venv/bin/python benchmarks/bench_pipeline_phases.py [--steps 24] [--port 18560]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.ring_ranks import add_options, launch, model_folder, rank_model  # noqa: E402

PHASES = ("wait", "layers", "hand on", "head")


def rank_main(args) -> int:
    group, model = rank_model(args.model, args.rank)  # imports inference first: fast BLAS before mlx
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from inference.distributed import pipeline

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


def run_config(args, parallel, port: int) -> list:
    """Run ``rank_main`` as one process (``parallel`` None) or two ranks; each rank's figures."""
    hostfile = Path(args.work) / f"ring-phases-{parallel}.json"
    return launch(__file__, args.model, ["--steps", str(args.steps)], parallel, port, hostfile)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser, port=18560)
    parser.add_argument("--steps", type=int, default=24, help="decode steps timed")
    args = parser.parse_args(argv)
    if args.rank is not None:
        return rank_main(args)
    args.model = model_folder(args)
    print(f"{args.steps} decode steps of one row, ms per step; cores: CPU seconds / wall seconds")
    print(f"{'':22} {'wall':>6} {'cores':>6} " + " ".join(f"{p:>8}" for p in PHASES))
    configs = [("one process", None), ("pipeline", "pipeline"), ("tensor", "tensor")]
    for i, (name, parallel) in enumerate(configs):
        for r in run_config(args, parallel, args.port + 2 * i):
            per = lambda s: 1000 * s / args.steps  # noqa: E731
            cells = " ".join(f"{per(r[p]):8.1f}" if parallel == "pipeline" else f"{'':>8}" for p in PHASES)
            label = name if parallel is None else f"{name}, rank {r['rank']}"
            print(f"{label:22} {per(r['wall']):6.1f} {r['cpu'] / r['wall']:6.2f} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
