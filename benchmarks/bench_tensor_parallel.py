"""One model on two ranks of MLX's ring backend on loopback, tensor parallel against pipeline
parallel against one process, side by side in one run (inference.distributed).

Each configuration starts its processes (one, or two ranks as ``mlx.launch`` starts them), which
load the model (cut for their rank), warm up, then time rounds of: a prefill of P prompt tokens
in one pass; S greedy decode steps of one row; S decode steps of B rows together. The figures
are medians over the rounds of tokens per second; the ratios are to one process (above 1:
faster). Both ranks share this machine's cores and talk over loopback TCP, so this measures
what the cut costs (the collectives, the eager evaluation of each pass), not what two machines
gain (a model that does not fit one machine, or twice the memory bandwidth).

The default model is the testkit's llama "small" preset widened (hidden 512, 8 heads of which 4
KV, MLP 1536, 8 layers, float32, about 25 M parameters in the layers), built once into
``--work``; ``--model DIR`` benchmarks a folder of your own (its heads and MLP width must divide
by two for tensor parallel).

    .venv/bin/python benchmarks/bench_tensor_parallel.py [--model DIR] [--prompt 128] [--steps 16]
                                                         [--rows 4] [--rounds 5] [--port 18550]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.ring_ranks import add_options, launch, model_folder, rank_model  # noqa: E402

CONFIGS = [("one process", None), ("pipeline, 2 ranks", "pipeline"), ("tensor, 2 ranks", "tensor")]


def rank_main(args) -> int:
    """One rank's (or the one process's) timings; rank 0 prints them as JSON."""
    group, model = rank_model(args.model, args.rank)  # imports inference first: fast BLAS before mlx
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

    prompt = mx.array([[(7 * i) % 1000 + 1 for i in range(args.prompt)]])

    def prefill():
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache))
        return cache

    def decode(rows: int) -> None:
        cache = [BatchKVCache([0] * rows) for _ in model.layers]
        mx.eval(model(mx.repeat(prompt[:, :32], rows, axis=0), cache=cache))
        token = mx.ones((rows, 1), dtype=mx.int32)
        for _ in range(args.steps):
            token = mx.argmax(model(token, cache=cache)[:, -1:], axis=-1)
            mx.eval(token)

    prefill(), decode(1)  # warm-up
    rates = {"prefill": [], "decode": [], "decode_rows": []}
    for _ in range(args.rounds):
        for key, run, tokens in [
            ("prefill", prefill, args.prompt),
            ("decode", lambda: decode(1), args.steps),
            ("decode_rows", lambda: decode(args.rows), args.steps * args.rows),
        ]:
            start = time.perf_counter()
            run()
            rates[key].append(tokens / (time.perf_counter() - start))
    if group.rank() == 0:
        print("RESULT " + json.dumps({k: statistics.median(v) for k, v in rates.items()}), flush=True)
    return 0


def run_config(args, parallel, port: int) -> dict:
    """Run ``rank_main`` as one process (``parallel`` None) or two ranks; rank 0's figures."""
    options = ["--prompt", str(args.prompt), "--steps", str(args.steps), "--rows", str(args.rows)]
    options += ["--rounds", str(args.rounds)]
    hostfile = Path(args.work) / f"ring-{parallel}.json"
    return launch(__file__, args.model, options, parallel, port, hostfile)[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser, port=18550)
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens of the prefill")
    parser.add_argument("--steps", type=int, default=16, help="decode steps a round")
    parser.add_argument("--rows", type=int, default=4, help="rows of the batched decode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.rank is not None:
        return rank_main(args)
    args.model = model_folder(args)
    results = {}
    for i, (name, parallel) in enumerate(CONFIGS):
        results[name] = run_config(args, parallel, args.port + 2 * i)
    one, pipe = results["one process"], results["pipeline, 2 ranks"]
    print(
        f"model {args.model.name}: prompt {args.prompt}, {args.steps} steps, {args.rows} rows, "
        f"median of {args.rounds}"
    )
    print(f"{'':20} {'prefill tok/s':>14} {'decode tok/s':>13} {f'x{args.rows} rows tok/s':>15}")
    for name, r in results.items():
        print(f"{name:20} {r['prefill']:14.0f} {r['decode']:13.1f} {r['decode_rows']:15.1f}")
    for label, base in [
        ("tensor / one process", one),
        ("pipeline / one process", one),
        ("tensor / pipeline", pipe),
    ]:
        top = results["tensor, 2 ranks"] if label.startswith("tensor") else pipe
        ratios = [top[k] / base[k] for k in ("prefill", "decode", "decode_rows")]
        print(f"{label:22} {ratios[0]:12.2f} {ratios[1]:13.2f} {ratios[2]:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
