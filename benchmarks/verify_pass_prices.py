"""What the speculation policy measured for the first verify passes of each request (issue 27):
the edit workload of bench_speculative (one stream, a 300-line file in the prompt, the float32
SmolLM2 copy, greedy, ``lookup``), several requests one after the other on one engine after two
plain ones; per request its decode speed and its first passes: the output position, width,
drafted tokens kept, the pass's seconds, the plain step's price and the policy's verify price
after it, and whether the row still drafts. A pass that paid for something else (a buffer grown
at the batch's first step) shows as a dear first pass and a row that stops drafting.

    PYTHONPATH=. OMLX_HOME=/tmp/omlx-shared-smollm2 .venv/bin/python benchmarks/verify_pass_prices.py
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import inference  # noqa: F401,E402
import bench_speculative as b  # noqa: E402
from inference.engine import LLM  # noqa: E402
from inference.engine.speculative import policy as P  # noqa: E402

PASSES = []


def wrap() -> None:
    observe = P.SpeculationPolicy.observe

    def observe_(self, rows, drafts, kept, seconds):
        plain = self._plain(len(rows))
        observe(self, rows, drafts, kept, seconds)
        PASSES.append(
            (
                len(rows[0].output_token_ids),
                1 + max(len(d) for d in drafts),
                kept[0],
                seconds,
                plain,
                self.verify_seconds,
                rows[0].speculation.active,
            )
        )

    P.SpeculationPolicy.observe = observe_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--passes", type=int, default=4, help="passes printed per request")
    parser.add_argument("--lines", type=int, default=300)
    args = parser.parse_args()
    wrap()
    folder = b.float32_copy(b.smollm2_folder())
    with LLM(folder, max_concurrent_requests=4) as llm:
        prompts = [b.edit_prompt(llm.tokenizer, args.lines, 0)]
        b.run(llm, prompts, 8, "off")  # the prompt into the block cache
        b.run(llm, prompts, 32, "off")  # a plain step's price
        for i in range(args.requests):
            PASSES.clear()
            speed, _ = b.run(llm, prompts, args.tokens, "lookup")
            print(f"request {i + 1}: {speed:.2f} tok/s, {len(PASSES)} verify passes")
            for at, width, kept, seconds, plain, verify, active in PASSES[: args.passes]:
                print(
                    f"  at {at:>3}: width {width}, kept {kept}, {seconds:.3f} s "
                    f"({seconds / plain:.2f} plain steps of {plain:.3f} s), verify price {verify:.3f} s, "
                    f"{'drafting' if active else 'plain (shadow)'}"
                )


if __name__ == "__main__":
    main()
