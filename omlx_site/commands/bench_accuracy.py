"""`omlx bench --scenario accuracy`: its flags and its summary (the scenario itself is
inference/bench/accuracy.py)."""

from __future__ import annotations

import sys

# flag -> AccuracySettings field
FLAGS = {"--limit": "limit", "--max-tokens": "max_tokens", "--program-timeout": "program_timeout"}
# flags of the other scenarios that mean nothing here
OTHER = {
    "--prompt-tokens": "prompt_tokens",
    "--gen-tokens": "gen_tokens",
    "--repeats": "repeats",
    "--cache-prompt-tokens": "cache_prompt_tokens",
    "--cached-repeats": "cached_repeats",
    "--no-ignore-eos": "no_ignore_eos",
    "--plot": "plot",
    "--speculative": "speculative",
}


def add_arguments(p) -> None:
    group = p.add_argument_group("accuracy scenario (--scenario accuracy)")
    group.add_argument(
        "--limit",
        type=int,
        help="HumanEval problems: the first N of 164 (default 164; preset small: 10; 0: perplexity only)",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        help="tokens generated per HumanEval problem at most (default 384; small: 256)",
    )
    group.add_argument(
        "--program-timeout",
        type=float,
        help="seconds each generated program may run in its sandbox (default 10)",
    )


def check_flags(args, accuracy: bool) -> None:
    """ValueError when a flag of another scenario is given."""
    if accuracy:
        given = [flag for flag, name in OTHER.items() if getattr(args, name) not in (None, False)]
        if given:
            raise ValueError(
                f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} not for --scenario accuracy"
            )
        return
    given = [flag for flag, name in FLAGS.items() if getattr(args, name) is not None]
    if given:
        raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --scenario accuracy")


def settings_from_args(args):
    """The AccuracySettings of the preset with the flags given; ValueError for bad values."""
    from dataclasses import replace

    from inference.bench import ACCURACY_PRESETS

    changes = {}
    if args.limit is not None:
        changes["limit"] = args.limit
    if args.max_tokens is not None:
        changes["max_tokens"] = args.max_tokens
    if args.program_timeout is not None:
        changes["timeout"] = args.program_timeout
    if args.concurrency is not None:
        try:
            changes["concurrency"] = int(args.concurrency)
        except ValueError:
            raise ValueError(
                f"--concurrency {args.concurrency!r}: --scenario accuracy takes one number"
            ) from None
    return replace(ACCURACY_PRESETS[args.preset], **changes)


def print_summary(results: dict, table) -> None:
    target, s = results["target"], results["settings"]
    where = target["url"] or f"local engine, {target.get('path')}"
    print(
        f"omlx bench --scenario accuracy: {target['model']} ({where}), {results['started_at']}, "
        f"{results['duration_s']:.1f} s"
    )
    ppl = results["perplexity"]
    if ppl is not None:
        print(
            f"perplexity: {ppl['perplexity']:.3f} over {ppl['tokens']} tokens of {ppl['text']} "
            f"(mean NLL {ppl['nll']:.4f} nats{', from the API' if ppl.get('via') else ''})"
        )
    else:
        print(f"perplexity: n/a ({results['perplexity_note']})")
    he = results["humaneval"]
    if he is None:
        print("HumanEval: not run (--limit 0)")
    else:
        outcomes = ", ".join(f"{n} {reason}" for reason, n in sorted(he["outcomes"].items()))
        table(
            f"HumanEval pass@1 (greedy, first {he['problems']} problems, at most {s['max_tokens']} tokens)",
            ("problems", "passed", "pass@1", "outcomes"),
            [(he["done"], he["passed"], f"{he['pass_at_1']:.1%}", outcomes)],
        )
    if results["errors"]:
        print("errors: " + "; ".join(results["errors"]))
    sys.stdout.flush()
