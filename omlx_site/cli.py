"""The ``omlx`` command line (upstream oMLX's): serve, worker, service, demo, build-model; pull,
models, cache, bench and launch live in omlx_site/commands/."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import inference  # noqa: F401  (loads the fast CPU BLAS before anything imports mlx)
from inference import platform
from inference.mcp import sdk
from inference.version import version
from omlx_site import config, redis_policy, restart, service
from omlx_site.commands import add_parsers
from omlx_site.server import serve
from omlx_site.worker import run_worker


def main(argv=None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `omlx models | head`: the reader has gone; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        # The interpreter's last collection would walk every object imported or made (mlx,
        # transformers, Django): a second or more at each exit, to free memory the exit frees anyway.
        gc.freeze()


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="omlx", description="Local LLM inference server on MLX.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"omlx {version()}",
        help="print omlx's version (the installed package's) and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="generate text with a model (the built-in random-weight demo model by default)",
        description="Stream a chat reply from a model, then print speed figures. Without --model "
        "it builds and uses the demo model (random weights: its text is gibberish by design).",
    )
    demo.add_argument("--model", help="a model folder (MLX or Hugging Face format)")
    demo.add_argument("--prompt", default="Tell me about caching.", help="the user message")
    demo.add_argument("--max-tokens", type=int, default=64)
    demo.add_argument("--temperature", type=float, default=0.7)
    demo.add_argument("--seed", type=int, default=0)

    serve = sub.add_parser(
        "serve",
        help="run the OpenAI-compatible API server",
        description="Serve the models in a folder over an OpenAI-compatible REST API (Daphne, "
        "with the Huey worker inside the process). With no model folder there, it serves the "
        "built-in demo model (random weights). With --redis-url, the queue and the channel layer "
        "live in Redis and `omlx worker` processes run the inference. Flags given are saved to "
        "$OMLX_HOME/settings.json and stay in force at the next start (docs/settings.md). SIGTERM or "
        "SIGINT: new requests get a 503, running ones may finish for $OMLX_SHUTDOWN_GRACE_SECONDS (10) "
        "before they are aborted, then it exits 0. Logs: the console, and JSON lines in "
        "$OMLX_HOME/logs/server.log.",
    )
    config.add_flags(serve, "serve")

    worker = sub.add_parser(
        "worker",
        help="run inference for `omlx serve --redis-url` in this process",
        description="Take requests from the Redis queue of `omlx serve --redis-url URL` and run "
        "them on this process's engines (the models are loaded here, from --model-dir). Give it "
        "the same --model-dir as the server. Same as `manage.py run_huey` with OMLX_REDIS_URL set. "
        "SIGINT or SIGTERM: running requests are aborted and the worker exits. Logs: the console, and "
        "JSON lines in $OMLX_HOME/logs/worker-PID.log.",
    )
    worker.add_argument(
        "--threads",
        type=int,
        default=None,
        help="Huey worker threads; a thread is busy only while a request starts (model loading) (default 2)",
    )
    config.add_flags(worker, "worker")

    build = sub.add_parser(
        "build-model",
        help="write a model folder with random weights (for tests and benchmarks)",
        description="Write a Hugging Face model folder with random weights and a locally trained "
        "tokenizer (same as `manage.py build_test_model`). gemma3_text, gpt_oss, nemotron_h, qwen3_5, "
        "qwen3_moe, the vision-language models, bert_embedding and bert_reranker need torch and "
        "transformers (pip install 'omlx[test]').",
    )
    build.add_argument("out", help="the folder to write")
    build.add_argument(
        "--arch",
        default="qwen2",
        help="llama, mistral, qwen2, qwen3 (tiny, small, "
        "qwen2.5-0.5b), gemma3_text, qwen3_5 (tiny, qwen2.5-0.5b), gpt_oss, nemotron_h, "
        "qwen3_moe (tiny); vision-language models: llava, gemma3, mistral3, qwen2_vl, qwen2_5_vl, "
        "qwen3_vl (tiny); embedding and reranker models: bert_embedding, bert_reranker, "
        "qwen3_embedding (tiny, small), qwen3_reranker (tiny)",
    )
    build.add_argument("--preset", default="tiny", help="tiny, small or qwen2.5-0.5b (see --arch)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    build.add_argument(
        "--quantize",
        type=int,
        choices=[4, 8],
        default=None,
        metavar="BITS",
        help="write an MLX-format folder quantized to 4 or 8 bits (mlx_lm.convert -q) instead",
    )
    build.add_argument("--group-size", type=int, default=64, help="quantization group size (default 64)")
    build.add_argument(
        "--script",
        default=None,
        metavar="TEXT",
        help="instead of random weights: a model whose greedy output after the chat "
        "template's generation prompt is TEXT, then end-of-sequence (llama, mistral, "
        "qwen2, qwen3; special tokens such as </think> or <tool_call> in TEXT are "
        "written as those tokens; --preset and --quantize do not apply)",
    )

    add_parsers(sub)  # pull, models, cache, bench (omlx_site/commands/)
    _add_service_parser(sub)

    # `omlx service install` passes the flags it does not know on to `omlx serve`.
    args, extra = parser.parse_known_args(argv)
    if args.command == "service":
        return _service(parser, serve, args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if hasattr(args, "run"):
        return args.run(args)
    if args.command == "demo":
        return _demo(args)
    if args.command == "serve":
        return _serve(parser, args)
    if args.command == "worker":
        return _worker(parser, args)
    if args.command == "build-model":
        from inference.testkit.registry import build_model, build_quantized  # mlx, and torch for some

        build_args = dict(arch=args.arch, preset=args.preset, seed=args.seed, dtype=args.dtype)
        try:
            if args.script is not None:
                if args.quantize:
                    parser.error("--script and --quantize do not go together")
                from inference.testkit.scripted import build_scripted_model  # mlx, as above

                path = build_scripted_model(
                    args.out, args.script, arch=args.arch, seed=args.seed, dtype=args.dtype
                )
            elif args.quantize:
                path = build_quantized(args.out, args.quantize, args.group_size, **build_args)
            else:
                path = build_model(args.out, **build_args)
        except (ValueError, ImportError) as exc:
            parser.error(str(exc))
        print(f"wrote {path}")
        return 0
    return 2


def _add_service_parser(sub) -> None:
    service = sub.add_parser(
        "service",
        help="run `omlx serve` as a user service (systemd on Linux, launchd on macOS)",
        description="install: write a systemd user unit (~/.config/systemd/user/omlx.service) or a "
        "launchd agent (~/Library/LaunchAgents/com.omlx.server.plist) that runs `omlx serve` with the "
        "flags given after install (e.g. `omlx service install --model-dir ~/models --port 8000`), "
        "restarts it when it crashes, and start it. uninstall: stop it and remove the file. status: "
        "whether it is installed and running (exit code 3 when not installed).",
    )
    actions = service.add_subparsers(dest="action", required=True)
    helps = {
        "install": "write the unit running `omlx serve` with the serve flags given after these options "
        "(e.g. --model-dir DIR --port 8000) and start it",
        "uninstall": "stop the service and remove its unit",
        "status": "whether the service is installed (exit code 3 when not) and running",
    }
    for action, text in helps.items():
        each = actions.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        each.add_argument(
            "--unit-dir",
            default=None,
            help="write or look for the unit in this folder instead of the manager's "
            "(nothing is started there)",
        )
        each.add_argument(
            "--manager",
            choices=("systemd", "launchd"),
            default=None,
            help="the service manager (default: launchd on macOS, systemd elsewhere)",
        )


def _service(parser, serve_parser, args, extra) -> int:
    serve_args = extra[1:] if extra[:1] == ["--"] else extra
    if serve_args and args.action != "install":
        parser.error(f"unrecognized arguments: {' '.join(serve_args)}")
    if serve_args:
        serve_parser.parse_args(serve_args)  # exits with serve's own message when a flag is wrong
    manager = service.service_for(args.manager or service.default_manager(), args.unit_dir)
    if args.action == "install":
        home = config.home().resolve()
        grace = config.load(home)["shutdown_grace_seconds"]
        outcome = manager.install(service.serve_command(serve_args), home, stop_seconds=grace + 60)
    elif args.action == "uninstall":
        outcome = manager.uninstall()
    else:
        outcome = manager.status()
    for line in outcome.lines:
        print(line)
    return outcome.code


def _settings(parser, args, command):
    """The flags given, checked; then every setting resolved (flag > environment > settings.json >
    default), so that a bad environment variable stops the command here with its name. Prints the
    values that come from settings.json."""
    given = config.flag_values(parser, args, command)
    try:
        resolved = config.resolve(cli=given)
    except ValueError as exc:
        parser.error(str(exc))
    from_file = [
        f"{key}={'***' if config.BY_KEY[key].secret else config.BY_KEY[key].kind.json(value)}"
        for key, (value, source) in resolved.items()
        if source == "file"
    ]
    if from_file:
        print(f"omlx: from {config.settings_file()}: {', '.join(from_file)}", file=sys.stderr)
    return given, {key: value for key, (value, _) in resolved.items()}


def _serve(parser, args) -> int:
    given, values = _settings(parser, args, "serve")
    try:
        config.check_together(values)
    except ValueError as exc:
        parser.error(str(exc))
    if values["mcp_config"] is not None:  # before anything starts: a clear message, not an ImportError
        try:
            sdk.require()
        except sdk.MCPUnavailable as exc:
            print(f"omlx: {exc}", file=sys.stderr)
            return 2
    if given:
        path = config.save(given)
        for verb, keys in (
            ("saved", [k for k, v in given.items() if v is not None]),
            ("removed", [k for k, v in given.items() if v is None]),
        ):
            if keys:
                print(
                    f"omlx: {verb} {', '.join(config.BY_KEY[k].flag for k in keys)} in {path}",
                    file=sys.stderr,
                )
    config.remember_launch(given, os.environ)  # the console tells flags from variables
    config.export(given)  # omlx_site.settings (and `manage.py run_huey` children) read the environment
    code = serve(values["host"], values["port"])
    if restart.requested():  # the console's Restart button: the same command line starts again
        restart.reexec()
    return code


def _worker(parser, args) -> int:
    given, values = _settings(parser, args, "worker")
    if not values["redis_url"]:
        parser.error("omlx worker needs --redis-url (or OMLX_REDIS_URL): the server's Redis")
    try:
        redis_policy.check(values)
    except ValueError as exc:
        parser.error(str(exc))
    config.export(given)
    threads = 2 if args.threads is None else args.threads
    if threads < 1:
        parser.error(f"--threads {threads}: must be >= 1")
    return run_worker(threads)


def _demo(args) -> int:
    from inference.engine import LLM, ModelLoadError, SamplingParams  # mlx: only when the demo runs
    from inference.testkit.demo import demo_model_path  # mlx and the test-model kit, as above

    info = platform.describe()
    print(f"omlx demo: backend {info.get('backend')}, BLAS {info.get('blas')}, dtype {info.get('dtype')}")
    path = args.model or demo_model_path()
    if not args.model:
        print(f"using the built-in demo model (random weights, gibberish output): {path}")
    try:
        llm = LLM(path)
    except ModelLoadError as exc:
        print(f"omlx: {exc}", file=sys.stderr)
        return 1
    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
    except ValueError as exc:
        print(f"omlx: {exc}", file=sys.stderr)
        return 2
    with llm:
        messages = [{"role": "user", "content": args.prompt}]
        prompt = llm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        start = time.perf_counter()
        first = None
        final = None
        for event in llm.engine.submit(list(prompt), params):
            if first is None and event.token_ids:
                first = time.perf_counter()
            sys.stdout.write(event.text)
            sys.stdout.flush()
            final = event
        end = time.perf_counter()
        n = final.usage.completion_tokens
        decode = (n - 1) / (end - first) if n > 1 and end > first else float("nan")
        print(
            f"\n\n{final.usage.prompt_tokens} prompt tokens, {n} generated ({final.finish_reason}); "
            f"first token after {first - start:.3f} s, {decode:.1f} tokens/s after it"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
