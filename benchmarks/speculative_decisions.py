"""What the speculation policy decided, step by step, on the edit workload of bench_speculative
(its prompts, the float32 SmolLM2 copy), issue 27 (c): speculation off, then ``lookup``, on one
engine, each run's decode speed (bench_speculative's measure) and, for the lookup run, how many
verify passes ran at each width (their median wall time, drafted tokens kept a row, rows that
drafted), what ``SpeculationPolicy.ready`` answered (go: a verify pass; no: no proposal, or the
batch's best width was 1; probe: a plain step to price a plain step again; hold: a request
waited for the step), how many steps had rows drafting, and the policy's last prices. The
policy's methods are wrapped to count; nothing else changes.

    PYTHONPATH=. OMLX_HOME=/tmp/omlx-shared-smollm2 .venv/bin/python benchmarks/speculative_decisions.py \
        --streams 16 --tokens 512

``--sequence`` also prints the steps as one letter each (W: a step with drafting rows, then g,
n, p or h as above; V: a verify pass; .: a step with no drafting row).
"""

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import inference  # noqa: F401,E402
import bench_speculative as b  # noqa: E402
from inference.engine import LLM  # noqa: E402
from inference.engine.speculative import policy as P  # noqa: E402
from inference.engine import step_costs as SC  # noqa: E402

EVENTS = []


def wrap():
    ready, wanted, observe, costs = (
        P.SpeculationPolicy.ready,
        P.SpeculationPolicy.wanted,
        P.SpeculationPolicy.observe,
        SC.StepCosts.observe,
    )

    def ready_(self, rows, context, late):
        holds, probes = self.prompt_holds, self.plain_probes
        out = ready(self, rows, context, late)
        why = "go" if out else "no"
        if self.prompt_holds > holds or self.plain_probes > probes:
            why = "hold" if self.prompt_holds > holds else "probe"
        EVENTS.append(("ready", why))
        return out

    def wanted_(self, rows, context):
        out = wanted(self, rows, context)
        EVENTS.append(("wanted", out))
        return out

    def observe_(self, rows, drafts, kept, seconds):
        width = 1 + max((len(d) for d in drafts), default=0)
        drafting = sum(1 for d in drafts if d)
        EVENTS.append(("verify", len(rows), width, sum(kept), drafting, seconds))
        observe(self, rows, drafts, kept, seconds)
        EVENTS.append(("prices", self._plain(len(rows)), self.position_seconds, self.verify_seconds))

    def costs_(self, rows, prompt_tokens, seconds, passes=0, computed=0):
        EVENTS.append(("step", rows, prompt_tokens, seconds))
        return costs(self, rows, prompt_tokens, seconds, passes, computed)

    P.SpeculationPolicy.ready, P.SpeculationPolicy.wanted = ready_, wanted_
    P.SpeculationPolicy.observe, SC.StepCosts.observe = observe_, costs_


def report(streams: int, sequence: bool) -> None:
    plain = [e[3] for e in EVENTS if e[0] == "step" and e[1] == streams and e[2] == 0]
    if plain:
        print(f"  plain steps of {streams} rows: {len(plain)}, median {statistics.median(plain):.3f} s")
    widths = collections.defaultdict(list)
    for e in EVENTS:
        if e[0] == "verify":
            widths[e[2]].append(e)
    for width, passes in sorted(widths.items()):
        kept = sum(p[3] for p in passes) / sum(p[1] for p in passes)
        seconds = statistics.median(p[5] for p in passes)
        print(
            f"  verify width {width}: {len(passes)} passes, median {seconds:.3f} s, "
            f"kept {kept:.2f} a row, {statistics.mean(p[4] for p in passes):.1f} rows drafting"
        )
    answers = collections.Counter(e[1] for e in EVENTS if e[0] == "ready")
    drafting = sum(1 for e in EVENTS if e[0] == "wanted" and e[1])
    idle = sum(1 for e in EVENTS if e[0] == "wanted" and not e[1])
    if answers or drafting:
        print(f"  ready: {dict(answers)}; steps with drafting rows {drafting}, without {idle}")
    prices = [e for e in EVENTS if e[0] == "prices"]
    if prices:
        _, plain_price, position, verify = prices[-1]
        print(f"  last prices: plain step {plain_price:.3f} s, position {position}, verify {verify:.3f} s")
    if sequence:
        letters = {"go": "g", "no": "n", "probe": "p", "hold": "h"}
        line = ""
        for e in EVENTS:
            if e[0] == "wanted":
                line += "W" if e[1] else "."
            elif e[0] == "ready":
                line += letters[e[1]]
            elif e[0] == "verify":
                line += "V"
        print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=512, help="output tokens per stream")
    parser.add_argument("--lines", type=int, default=300, help="lines of the file in the edit prompt")
    parser.add_argument("--sequence", action="store_true")
    args = parser.parse_args()
    wrap()
    folder = b.float32_copy(b.smollm2_folder())
    with LLM(folder, max_concurrent_requests=max(16, args.streams), step_token_budget=4096) as llm:
        prompts = [b.edit_prompt(llm.tokenizer, args.lines, s) for s in range(args.streams)]
        b.run(llm, prompts, 8, "off")  # the prompts into the block cache
        speeds, outputs = {}, {}
        for method in ("off", "lookup"):
            EVENTS.clear()
            began = time.perf_counter()
            speeds[method], outputs[method] = b.run(llm, prompts, args.tokens, method)
            wall = time.perf_counter() - began
            print(f"{method}: {speeds[method]:.1f} tok/s, wall {wall:.1f} s", flush=True)
            report(args.streams, args.sequence and method == "lookup")
        same = outputs["off"] == outputs["lookup"]
        print(f"lookup / off: {speeds['lookup'] / speeds['off']:.2f}x, identical {same}")


if __name__ == "__main__":
    main()
