"""The agentic load (`omlx bench --scenario agentic`) against `omlx serve` and against mlx-lm's
own server, side by side in one run.

Both servers serve the same model folder at the same time (started as in bench_servers.py: same
OpenBLAS preloaded; mlx-lm's model name is ``default_model``). The same scenario
(inference.bench.agentic over the OpenAI URL target: streamed /v1/chat/completions with the
tool definitions as text in the system prompt, so both see identical prompts) runs against each,
alternating which goes first, ``--rounds`` times (3 for a figure; fewer is a smoke run); every
run has its own session nonce, so no run reuses the cache of an earlier one. ``--mode closed``
(the default, issue 24) runs ``--burst`` clients that each send their conversation's next turn as
soon as their own answer has ended; ``--mode burst`` (issue 12's runs) sends ``--burst`` requests
at once and the next burst when all have answered. Each figure is printed as the median over
rounds of each server (a table of its own), and as the median of the per-round ratios omlx / mlx-lm
(TTFT, request latency and ITL: below 1 is omlx faster; output tokens/s: above 1 is omlx faster)
next to the two values of the round that has that ratio and every round's ratio
(benchmarks/rounds.py). Request latency: a request's first byte sent to its last token received.
Each run's figures are also printed to stderr as it ends (a run stopped early leaves its
finished rounds).

Same output length on both: omlx gets ``ignore_eos``; mlx-lm's server does not know it, so it
gets ``logit_bias`` -1e4 on the model's end-of-sequence tokens instead (it applies logit_bias),
and the completion tokens of each side are printed to show they match.

With ``--step-trace N`` omlx records its engine steps (`omlx serve --step-trace N`, at most
1024 are read back per run) and each of its runs prints where the steps' time went, by step
composition (decode only, decode with prompt tokens, the same two with a speculative verify
pass, prompt tokens only): docs/engine.md "Step trace"; and, at the end, what its requests
waited for before their first tokens (the step they arrived during, other requests' prompt
steps, steps between, their own: benchmarks/arrival_waits.py). ``--omlx-only`` runs omlx alone
(no ratio: for a trace).

``--gen-spread S`` (closed loop): each turn generates ``--gen-tokens`` plus an offset in [-S, S]
drawn from its conversation and turn (the same lengths on every run and side). With equal
lengths the arrivals of a closed loop can fall into a rotation (each client's answer ends while
the others decode) that answers of varied lengths, like an agent's, do not keep.

``--speculative lookup`` (or suffix) compares omlx with itself instead of with mlx-lm: one
`omlx serve` (its model's speculative setting off), every request of one side asking for the
method (the per-request ``speculative`` extension) and every request of the other for ``off``,
alternating which goes first; the ratio is METHOD / off. Each run also prints what omlx's
/metrics speculative counters did over it (accepted / drafted tokens, tokens per verify pass).

    .venv/bin/python benchmarks/bench_agentic.py [--quick] [--model-preset tiny|small|qwen2.5-0.5b]
        [--model FOLDER] [--rounds 3] [--mode closed|burst]
        [--conversations N --turns T --system-tokens S --gen-spread S ...] [--json out.json]
        [--step-trace 1024] [--omlx-only] [--speculative lookup|suffix]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from inference.bench import AGENTIC_PRESETS, AgenticSettings, OpenAITarget, run_agentic  # noqa: E402
from inference.bench.speculation import describe  # noqa: E402
from benchmarks.arrival_waits import waits_table  # noqa: E402
from benchmarks.bench_servers import start_servers, stop_servers  # noqa: E402
from benchmarks.rounds import compare, medians_table, ratio_table, run_rounds  # noqa: E402

# --quick: a few seconds per run on the tiny model, enough to see every figure move
QUICK = AgenticSettings(
    conversations=4, turns=3, system_tokens=256, context_tokens=32, new_tokens=32, gen_tokens=16, burst=2
)
SIZE_FLAGS = (
    "conversations",
    "turns",
    "system_tokens",
    "context_tokens",
    "new_tokens",
    "gen_tokens",
    "gen_spread",
    "burst",
)


def eos_ids(folder: Path) -> list:
    """The model's end-of-sequence token ids, as mlx-lm's server stops on them."""
    from mlx_lm.utils import load_tokenizer

    config = json.loads((folder / "config.json").read_text())
    ids = config.get("eos_token_id")
    ids = set(ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else [])
    ids |= set(load_tokenizer(folder).eos_token_ids)
    return sorted(ids)


def figures(results: dict) -> dict:
    """The compared figures of one run: name -> (value, unit)."""
    s = results["summary"]
    return {
        "TTFT p50": (s["ttft_s"]["p50"], "ms"),
        "TTFT p95": (s["ttft_s"]["p95"], "ms"),
        "TTFT p99": (s["ttft_s"]["p99"], "ms"),
        "request latency p50": (s["latency_s"]["p50"], "ms"),
        "request latency p95": (s["latency_s"]["p95"], "ms"),
        "ITL p50": (s["itl_s"]["p50"], "ms"),
        "ITL p95": (s["itl_s"]["p95"], "ms"),
        "output tok/s": (s["output_tokens_per_s"], "tok/s"),
    }


PHASES = ("queue", "restore", "prefill", "prefill_wait", "decode")


def phase_totals(url: str) -> dict:
    """omlx's /metrics: (phase, "sum" | "count") -> value of omlx_request_phase_seconds, all models."""
    import re
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    totals = {}
    for line in text.splitlines():
        match = re.match(r"omlx_request_phase_seconds_(sum|count)\{(.*)\} (\S+)$", line)
        if match:
            phase = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))["phase"]
            key = (phase, match.group(1))
            totals[key] = totals.get(key, 0.0) + float(match.group(3))
    return totals


def phase_means(before: dict, after: dict) -> dict:
    """Mean seconds per request in each engine phase between two /metrics readings."""
    out = {}
    for phase in PHASES:
        count = after.get((phase, "count"), 0) - before.get((phase, "count"), 0)
        total = after.get((phase, "sum"), 0) - before.get((phase, "sum"), 0)
        out[phase] = total / count if count else None
    return out


TRACE_READ = 1024  # records GET /v1/engine/step_trace gives at most (inference/api/omlx/step_trace.py)
TIMES = (
    "prefill",
    "decode",
    "restore",
    "merge",
    "prefill_compute",
    "store",
    "sampling",
    "launch",
    "device_wait",
    "host",
)


def last_step(url: str) -> int:
    """The engine's latest step index in omlx's step trace (0 before any)."""
    steps = _trace(url, 1)
    return steps[-1]["step"] if steps else 0


def _trace(url: str, last: int) -> list:
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/engine/step_trace?last={last}", timeout=30) as answer:
        rows = json.loads(answer.read())["data"]
    return rows[0]["steps"] if rows else []


def step_kind(record: dict) -> str:
    if record.get("verify"):  # a speculative verify pass (--speculative)
        return "verify + prompt" if record["prompt_tokens"] else "verify only"
    if record["decode_passes"] and record["prompt_tokens"]:
        return "decode + prompt"
    if record["decode_passes"]:
        return "decode only"
    if record["prompt_tokens"]:
        return "prompt only"
    return "neither"


def trace_table(records: list) -> str:
    """Where the steps' time went, one row per step composition: steps, share of the wall time,
    mean step, mean decode rows, prompt tokens and prefill passes, and the mean milliseconds of
    each part (inference.engine.step_trace; prefill and decode are wall times that hold the
    parts after them, host is what no clock covers)."""
    total = sum(r["seconds"] for r in records) or 1.0
    head = ["steps", "share", "step ms", "rows", "prompt tok", "passes"] + [f"{t} ms" for t in TIMES]
    lines = ["| kind | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for kind in (
        "decode only",
        "decode + prompt",
        "verify only",
        "verify + prompt",
        "prompt only",
        "neither",
    ):
        rows = [r for r in records if step_kind(r) == kind]
        if not rows:
            continue
        mean = lambda key: statistics.fmean(r[key] for r in rows)  # noqa: E731
        cells = [
            str(len(rows)),
            f"{100 * sum(r['seconds'] for r in rows) / total:.0f} %",
            f"{1000 * mean('seconds'):.1f}",
            f"{mean('decode_rows'):.2f}",
            f"{mean('prompt_tokens'):.1f}",
            f"{mean('prefill_passes'):.2f}",
        ] + [f"{1000 * mean(t + '_seconds'):.1f}" for t in TIMES]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _show(value, unit) -> str:
    return f"{value * 1000:.1f} ms" if unit == "ms" else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (4 x 3 turns, 256-token system prompt, "
        "16 tokens per turn, 2 in flight) and the tiny model unless --model-preset/--model",
    )
    parser.add_argument(
        "--model-preset",
        help="testkit preset of the model (tiny, small, qwen2.5-0.5b; default small, tiny with --quick)",
    )
    parser.add_argument("--model", help="a model folder instead of a built one")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds (3 for a figure; 1 or 2: a smoke run)"
    )
    parser.add_argument(
        "--mode",
        choices=AgenticSettings.MODES,
        help="closed (default): each of --burst "
        "clients sends its next turn when its own answer has ended; burst: --burst requests "
        "at once, the next burst when all have answered",
    )
    for name in SIZE_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), type=int, help=f"override the scenario's {name}")
    parser.add_argument("--json", help="also write every run's results here")
    parser.add_argument(
        "--step-trace",
        type=int,
        default=0,
        metavar="N",
        help="omlx records its last N engine steps; each omlx run prints their composition",
    )
    parser.add_argument("--omlx-only", action="store_true", help="run omlx alone (no mlx-lm, no ratios)")
    parser.add_argument(
        "--speculative",
        choices=("lookup", "suffix"),
        help="omlx with this speculative method against omlx with speculation off (no mlx-lm)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if not 0 <= args.step_trace:
        parser.error("--step-trace: 0 (off) or more steps")
    settings = QUICK if args.quick else AGENTIC_PRESETS["default"]
    settings = replace(
        settings, **{n: getattr(args, n) for n in SIZE_FLAGS + ("mode",) if getattr(args, n) is not None}
    )
    model_preset = args.model_preset or ("tiny" if args.quick else "small")
    with tempfile.TemporaryDirectory(prefix="omlx-bench-agentic-") as tmp:
        work = Path(tmp)
        if args.model:
            folder = Path(args.model).resolve()
        else:
            from inference.testkit.registry import build_model

            folder = build_model(work / "built", preset=model_preset)
        bias = {str(i): -1e4 for i in eos_ids(folder)}
        names = ("omlx",) if args.omlx_only or args.speculative else ("omlx", "mlx-lm")
        trace_args = ("--step-trace", str(args.step_trace)) if args.step_trace else ()
        servers = start_servers(folder, work, names, omlx_args=trace_args)
        sides = (args.speculative, "off") if args.speculative else names
        ours, theirs = sides[0], sides[-1]

        def run_one(side):
            name = "omlx" if args.speculative else side
            _, url, model = servers[name]
            extra = {"logit_bias": bias} if name == "mlx-lm" and settings.ignore_eos else None
            before = phase_totals(url) if name == "omlx" else None
            first = last_step(url) if name == "omlx" and args.step_trace else None
            mine = replace(settings, speculative=side) if args.speculative else settings
            with OpenAITarget(url + "/v1", model, extra_body=extra) as target:
                run = run_agentic(target, mine)
            if before is not None:  # the warm-up request of the run counts too
                run["summary"]["phases_s"] = phase_means(before, phase_totals(url))
            if first is not None:
                records = [r for r in _trace(url, TRACE_READ) if r["step"] > first]
                run["step_trace"] = records
                print(
                    f"omlx run {len(runs_done) + 1}: its last {len(records)} steps "
                    f"(of {last_step(url) - first}) by composition:\n{trace_table(records)}\n",
                    flush=True,
                )
            runs_done.append(side)
            shown = ", ".join(f"{n} {_show(v, u)}" for n, (v, u) in figures(run).items())
            if name == "omlx":
                shown += "; " + describe(run["speculative"])
            print(f"{side} run {len(runs_done)}: {shown}", file=sys.stderr, flush=True)
            return run

        runs_done = []

        try:
            runs = run_rounds(list(sides), args.rounds, run_one)
        finally:
            stop_servers(servers)
    s = settings
    print(
        f"agentic load: {s.conversations} conversations x {s.turns} turns, "
        f"{s.system_tokens}-token system prompt, "
        f"{s.context_tokens} context, {s.new_tokens} new and {s.gen_tokens}"
        f"{f' +- {s.gen_spread}' if s.gen_spread else ''} generated tokens per turn, "
        f"{s.arrival()}; model {args.model or model_preset} (float32, OpenBLAS); {args.rounds} round"
        f"{'s' if args.rounds > 1 else ''}"
        f"{' (a smoke run: 3 for a figure)' if args.rounds < 3 else ''}"
        + (
            ""
            if args.omlx_only
            else f"; ratio = {ours} / {theirs}, the median of the per-round ratios, next to the two values "
            "of the round that has it"
        )
    )
    if len(runs) == 2:
        label = {"omlx": "omlx", "mlx-lm": "mlx-lm server"}
        table = [
            compare(name, runs[ours], runs[theirs], lambda run, n=name: figures(run)[n][0])
            for name in figures(runs[ours][0])
        ]
        show = lambda c, v: _show(v, figures(runs[ours][0])[c.name][1])  # noqa: E731
        a, b = label.get(ours, f"omlx {ours}"), label.get(theirs, f"omlx {theirs}")
        print(ratio_table(table, a, b, f"{ours} / {theirs}", show))
        print("\neach side's own median over rounds (context; a ratio of these is not the figure):\n")
        print(medians_table(table, a, b, show))
        if args.speculative:
            print("\nspeculative decoding over each side's runs (omlx's /metrics):")
            for side in sides:
                print(f"- {side}: " + "; ".join(describe(run["speculative"]) for run in runs[side]))
    else:  # --omlx-only
        print("\nomlx alone, the median over rounds:\n\n| figure | omlx |\n|---|---:|")
        for name, (_, unit) in figures(runs["omlx"][0]).items():
            value = statistics.median(figures(run)[name][0] for run in runs["omlx"])
            print(f"| {name} | {_show(value, unit)} |")
    print(
        "\nwhere an omlx request's time went (engine phases, mean seconds per request; from omlx's /metrics, "
        "omlx_request_phase_seconds, over each run; median over rounds):"
    )
    omlx_sides = list(runs) if args.speculative else ["omlx"]
    print("| side | " + " | ".join(PHASES) + " | TTFT mean (client) |\n|---|" + "---:|" * (len(PHASES) + 1))
    for side in omlx_sides:
        phases = [run["summary"]["phases_s"] for run in runs[side]]
        means = [statistics.median(p[ph] for p in phases if p[ph] is not None) for ph in PHASES]
        ttft = statistics.median(run["summary"]["ttft_s"]["mean"] for run in runs[side])
        print(f"| {side} | " + " | ".join(f"{m:.3f}" for m in means) + f" | {ttft:.3f} |")
    if args.step_trace:
        print(
            "\nwhat an omlx request waited for before its first token (mean ms per request over its "
            "side's runs, from the step trace: benchmarks/arrival_waits.py):\n"
        )
        print(waits_table({side: runs[side] for side in omlx_sides}))
    for name in runs:
        totals = [run["summary"] for run in runs[name]]
        cached = [t["cached_tokens"] for t in totals]
        print(
            f"{name}: output tokens per round {[t['output_tokens'] for t in totals]}, prompt tokens "
            f"{[t['prompt_tokens'] for t in totals]}, cached {['n/a' if c is None else c for c in cached]}, "
            f"errors {sum(t['errors'] for t in totals)} {runs[name][-1]['errors']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
