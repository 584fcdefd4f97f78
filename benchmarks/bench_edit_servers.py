"""The edit workload over HTTP: `omlx serve` with prompt lookup next to mlx-lm's own server on the
same folder (issue 27, benchmark (a), its second half), side by side in one run.

Both servers run as real processes on the float32 copy of SmolLM2-135M-Instruct
(``bench_speculative``), started as ``bench_servers.start_servers`` starts them (same OpenBLAS
preloaded). Each gets the same chat request, streamed: the edit prompt (``edit_prompt``'s text, a
file of ``--lines`` lines to copy back with one change) as one user message, greedy, ``--tokens``
output tokens (omlx: ``ignore_eos``; mlx-lm's server does not know it, so it gets ``logit_bias``
-1e4 on the end-of-sequence tokens instead). Three sides, the order rotating each round
(benchmarks/rounds.py): omlx asking for ``speculative: {"method": "lookup"}``, omlx asking for
``off`` (the same server), and mlx-lm. One request per side is sent first and not counted (the
model loads, the prompt goes to each server's prompt cache), so the rounds time decoding.

Printed: each side's decode tokens/s (output tokens after the first, over the time from the
first token to the last: ``StreamResult.decode_tokens_per_s``), the medians of the per-round
ratios lookup / mlx-lm and lookup / off with every round's ratio, omlx's speculative counters
over its lookup requests (/metrics: accepted / drafted tokens, tokens per verify pass), whether
the three answers are the same text, and the load average before and after (the machine is shared).

    .venv/bin/python benchmarks/bench_speculative.py --only edit-servers [--tokens 128] [--rounds 2]
        [--lines 300]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_agentic import eos_ids
from benchmarks.bench_servers import start_servers, stop_servers
from benchmarks.rounds import compare, ratio_table, run_rounds
from inference.bench import OpenAITarget
from inference.bench.speculation import describe, difference

SIDES = ("omlx lookup", "omlx off", "mlx-lm")


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(folder: Path, text: str, args) -> None:
    """``text``: the edit prompt's user message (``bench_speculative.edit_text``)."""
    messages = [{"role": "user", "content": text}]
    bias = {str(i): -1e4 for i in eos_ids(folder)}
    print(f"edit-servers: SmolLM2 {folder}; {args.tokens} tokens, {args.rounds} rounds; {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="omlx-bench-edit-servers-") as tmp:
        servers = start_servers(folder, Path(tmp))
        targets = {}
        try:
            for side, method in (("omlx lookup", "lookup"), ("omlx off", "off")):
                _, url, model = servers["omlx"]
                targets[side] = OpenAITarget(url + "/v1", model)
                targets[side].speculative = method
            _, url, model = servers["mlx-lm"]
            targets["mlx-lm"] = OpenAITarget(url + "/v1", model, extra_body={"logit_bias": bias})
            counts = []

            def one(side: str, tokens: int):
                target = targets[side]
                before = target.speculative_counters() if side == "omlx lookup" else None
                result = target.chat([messages], tokens, ignore_eos=side != "mlx-lm")[0]
                if result.error is not None:
                    raise RuntimeError(f"{side}: {result.error}")
                if before is not None:
                    counts.append(difference(before, target.speculative_counters(), "lookup"))
                return result

            for side in SIDES:  # not counted: the model loads, the prompt is cached
                one(side, 8)
            runs = run_rounds(SIDES, args.rounds, lambda side: one(side, args.tokens))
        finally:
            for target in targets.values():
                target.close()
            stop_servers(servers)
    speed = lambda r: r.decode_tokens_per_s  # noqa: E731
    show = lambda c, v: f"{v:.1f} tok/s"  # noqa: E731
    for ours, theirs in (("omlx lookup", "mlx-lm"), ("omlx lookup", "omlx off"), ("omlx off", "mlx-lm")):
        table = [compare("decode tokens/s", runs[ours], runs[theirs], speed)]
        print(ratio_table(table, ours, theirs, f"{ours} / {theirs}", show) + "\n", flush=True)
    for side in SIDES:
        tokens = [r.completion_tokens for r in runs[side]]
        speeds = [speed(r) for r in runs[side]]
        print(
            f"{side}: decode tok/s per round {' '.join(f'{v:.2f}' for v in speeds)} (median "
            f"{statistics.median(speeds):.2f}), completion tokens per round {tokens}"
        )
    total = {k: sum(c[k] for c in counts) for k in ("drafted_tokens", "accepted_tokens", "verify_passes")}
    total["emitted_tokens"] = sum(c["emitted_tokens"] for c in counts)
    print(describe(difference(dict.fromkeys(total, 0), total, "lookup")) + " (omlx's /metrics, its rounds)")
    texts = {side: runs[side][-1].text for side in SIDES}
    print(
        f"same answer: lookup = off {texts['omlx lookup'] == texts['omlx off']}, "
        f"omlx = mlx-lm {texts['omlx off'] == texts['mlx-lm']}; {load()}",
        flush=True,
    )
    sys.stdout.flush()
