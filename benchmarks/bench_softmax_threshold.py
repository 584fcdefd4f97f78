"""The CPU attention's softmax threshold (``cpu_numpy.SOFTMAX_MIN``: scores from this many
elements on go through NumPy) at two values side by side on one engine, issue 27 (a): the edit
workload of bench_speculative (a 300-line file in the prompt, the float32 SmolLM2 copy, greedy),
speculation off and ``lookup``, the thresholds alternating in order each round. Prints decode
tokens/s per threshold and method (bench_speculative's measure), the ratios, and whether every
run gave the same tokens.

    PYTHONPATH=. OMLX_HOME=/tmp/omlx-shared-smollm2 .venv/bin/python benchmarks/bench_softmax_threshold.py \\
        --old 65536 --new 8192 --tokens 128 --rounds 2
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import inference  # noqa: F401,E402  (fast BLAS before mlx)
import bench_speculative as b  # noqa: E402
from inference.engine import LLM, cpu_numpy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=int, default=65536)
    parser.add_argument("--new", type=int, default=cpu_numpy.SOFTMAX_MIN)
    parser.add_argument("--tokens", type=int, default=128, help="output tokens per stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--lines", type=int, default=300, help="lines of the file in the edit prompt")
    args = parser.parse_args()
    if args.old == args.new or min(args.old, args.new) < 0 or args.tokens < 2 or args.rounds < 1:
        parser.error("two different thresholds >= 0, --tokens >= 2, --rounds >= 1")
    folder = b.float32_copy(b.smollm2_folder())
    speeds, outputs = {}, set()
    with LLM(folder, max_concurrent_requests=max(16, args.streams)) as llm:
        prompts = [b.edit_prompt(llm.tokenizer, args.lines, s) for s in range(args.streams)]
        b.run(llm, prompts, 8, "off")  # the prompts into the block cache
        for r in range(args.rounds):
            order = (args.old, args.new) if r % 2 == 0 else (args.new, args.old)
            for threshold in order:
                cpu_numpy.SOFTMAX_MIN = threshold
                for method in ("off", "lookup"):
                    speed, out = b.run(llm, prompts, args.tokens, method)
                    speeds.setdefault((threshold, method), []).append(speed)
                    outputs.add(tuple(map(tuple, out)))
                    print(f"round {r + 1} threshold {threshold} {method}: {speed:.2f} tok/s", flush=True)
    med = {key: statistics.median(v) for key, v in speeds.items()}
    old, new = args.old, args.new
    for threshold in (old, new):
        off, lookup = med[(threshold, "off")], med[(threshold, "lookup")]
        print(f"threshold {threshold}: off {off:.2f}, lookup {lookup:.2f} tok/s, ratio {lookup / off:.2f}x")
    for method in ("off", "lookup"):
        print(f"{method}: threshold {new} / {old}: {med[(new, method)] / med[(old, method)]:.3f}x")
    print(f"lookup at {new} / off at {old}: {med[(new, 'lookup')] / med[(old, 'off')]:.2f}x")
    print(f"identical outputs: {len(outputs) == 1}")


if __name__ == "__main__":
    main()
