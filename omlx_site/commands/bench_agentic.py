"""`omlx bench --scenario agentic`: its flags and its summary table (the scenario itself is
inference/bench/agentic.py)."""

from __future__ import annotations

import sys

from inference.bench.speculation import describe

# flag -> AgenticSettings field
FLAGS = {
    "--conversations": "conversations",
    "--turns": "turns",
    "--system-tokens": "system_tokens",
    "--context-tokens": "context_tokens",
    "--new-tokens": "new_tokens",
    "--burst": "burst",
    "--mode": "mode",
}
# flags of the default scenario that mean nothing here
DEFAULT_ONLY = {
    "--concurrency": "concurrency",
    "--prompt-tokens": "prompt_tokens",
    "--repeats": "repeats",
    "--cache-prompt-tokens": "cache_prompt_tokens",
    "--cached-repeats": "cached_repeats",
    "--plot": "plot",
}


def add_arguments(p) -> None:
    group = p.add_argument_group("agentic scenario (--scenario agentic)")
    group.add_argument("--conversations", type=int, help="conversations (default 12; preset small: 3)")
    group.add_argument("--turns", type=int, help="turns per conversation (default 3; small: 2)")
    group.add_argument(
        "--system-tokens",
        type=int,
        help="tokens of the shared system prompt with the tool definitions (default 1024; small: 64)",
    )
    group.add_argument(
        "--context-tokens",
        type=int,
        help="tokens of each conversation's own context, in its first user message (default 128; small: 16)",
    )
    group.add_argument(
        "--new-tokens", type=int, help="tokens of the new user text of every turn (default 64; small: 16)"
    )
    group.add_argument(
        "--burst",
        type=int,
        help="requests in flight: with --mode closed the clients, "
        "with --mode burst the requests sent at once (default 4; small: 2)",
    )
    group.add_argument(
        "--mode",
        choices=("closed", "burst"),
        help="closed (default): each client sends "
        "its conversation's next turn as soon as its own answer has ended; burst: --burst "
        "requests at once, the next burst when all have answered",
    )


def check_flags(args, agentic: bool) -> None:
    """ValueError when a flag of the other scenario is given."""
    wrong = DEFAULT_ONLY if agentic else FLAGS
    given = [flag for flag, name in wrong.items() if getattr(args, name) is not None]
    if given:
        other = "the default scenario" if agentic else "--scenario agentic"
        raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for {other}")
    if agentic and args.endpoint == "completions":
        raise ValueError("--scenario agentic always streams /v1/chat/completions (no --endpoint)")


def settings_from_args(args):
    """The AgenticSettings of the preset with the flags given; ValueError for bad values."""
    from dataclasses import replace

    from inference.bench import AGENTIC_PRESETS

    changes = {name: getattr(args, name) for name in FLAGS.values() if getattr(args, name) is not None}
    if args.speculative is not None:
        changes["speculative"] = args.speculative
    if args.gen_tokens is not None:
        changes["gen_tokens"] = args.gen_tokens
    if args.no_ignore_eos:
        changes["ignore_eos"] = False
    return replace(AGENTIC_PRESETS[args.preset], **changes)


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _n(value) -> str:
    if value is None:
        return "n/a"
    return str(round(value)) if isinstance(value, float) else str(value)


def print_summary(results: dict, table) -> None:
    """The compact table of one run; ``table(title, head, rows)`` prints one table."""
    from inference.bench import AgenticSettings

    target, s, total = results["target"], results["settings"], results["summary"]
    where = target["url"] or f"local engine, {target.get('path')}"
    print(
        f"omlx bench --scenario agentic: {target['model']} ({where}), {results['started_at']}, "
        f"{results['duration_s']:.1f} s"
    )
    print(
        f"{s['conversations']} conversations x {s['turns']} turns, "
        f"a shared {s['system_tokens']}-token system "
        f"prompt with {results['prompts']['tools']} tool definitions, "
        f"{s['context_tokens']} tokens of context per "
        f"conversation, {s['new_tokens']} new and {s['gen_tokens']} generated tokens per turn"
        f"{' (ignore_eos)' if s['ignore_eos'] else ''}, {AgenticSettings.from_dict(s).arrival()}"
    )
    ttft, itl, latency = total["ttft_s"], total["itl_s"], total["latency_s"]
    rate = total["output_tokens_per_s"]
    table(
        "load",
        (
            "requests",
            "ok",
            "errors",
            "skipped",
            "TTFT p50 ms",
            "p95",
            "p99",
            "ITL p50 ms",
            "p95",
            "latency p50 ms",
            "p95",
            "output tokens",
            "output tok/s",
        ),
        [
            (
                total["requests"],
                total["ok"],
                total["errors"],
                total["skipped"],
                _ms(ttft["p50"]),
                _ms(ttft["p95"]),
                _ms(ttft["p99"]),
                _ms(itl["p50"]),
                _ms(itl["p95"]),
                _ms(latency["p50"]),
                _ms(latency["p95"]),
                total["output_tokens"],
                "-" if rate is None else f"{rate:.2f}",
            )
        ],
    )
    print("latency: a request's first byte sent to its last token received")
    share = total["reused_share"]
    table(
        "prompt tokens: computed vs reused (usage.prompt_tokens_details.cached_tokens)",
        ("prompt", "cached", "computed", "reused", "hot", "cold"),
        [
            (
                total["prompt_tokens"],
                _n(total["cached_tokens"]),
                _n(total["computed_tokens"]),
                "n/a" if share is None else f"{share:.0%}",
                _n(total["hot_cached_tokens"]),
                _n(total["cold_cached_tokens"]),
            )
        ],
    )
    rows = []
    for turn in results["turns"]:
        cached = turn["cached_tokens"]
        rows.append(
            (
                turn["turn"],
                turn["ok"],
                _n(turn["prompt_tokens"]["p50"]),
                "n/a" if cached is None else _n(cached["p50"]),
                _n(turn["prompt_growth"]["p50"]),
                _ms(turn["ttft_s"]["p50"]),
                _ms(turn["ttft_s"]["p95"]),
            )
        )
    table(
        "per turn (medians over conversations)",
        ("turn", "ok", "prompt tokens", "cached", "growth", "TTFT p50 ms", "p95"),
        rows,
    )
    if s.get("speculative") is not None or results.get("speculative"):
        print(describe(results.get("speculative")))
    if results["errors"]:
        print("errors: " + "; ".join(results["errors"]))
    sys.stdout.flush()
