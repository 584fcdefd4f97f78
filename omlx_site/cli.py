"""The ``omlx`` command line (upstream oMLX's): serve, worker, service, demo, build-model."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    import inference  # noqa: F401  (loads the fast CPU BLAS before anything imports mlx)

    parser = argparse.ArgumentParser(prog="omlx", description="Local LLM inference server on MLX.")
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
        "live in Redis and `omlx worker` processes run the inference. SIGTERM or SIGINT: new requests "
        "get a 503, running ones may finish for $OMLX_SHUTDOWN_GRACE_SECONDS (10) before they are "
        "aborted, then it exits 0. Logs: the console, and JSON lines in $OMLX_HOME/logs/server.log.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    _add_model_flags(serve)
    serve.add_argument("--api-key", help="require this key (Authorization: Bearer KEY or x-api-key)")
    serve.add_argument("--redis-url", default=None,
                       help="Redis for the queue and the channel layer, e.g. redis://127.0.0.1:6379/0 "
                       "(default $OMLX_REDIS_URL; unset: SQLite queue, in-process channel layer)")
    serve.add_argument("--workers", type=int, default=None,
                       help="Huey worker threads inside the server (default 2; with Redis 0: "
                       "`omlx worker` processes run the inference)")
    serve.add_argument("--max-request-size", default=None,
                       help="largest request body, e.g. 32MiB; larger ones get a 413 (default 32MiB)")
    serve.add_argument("--max-queued-requests", type=int, default=None,
                       help="requests per model that may wait beyond --max-concurrent-requests; "
                       "more get a 429 (default 256)")

    worker = sub.add_parser(
        "worker",
        help="run inference for `omlx serve --redis-url` in this process",
        description="Take requests from the Redis queue of `omlx serve --redis-url URL` and run "
        "them on this process's engines (the models are loaded here, from --model-dir). Give it "
        "the same --model-dir as the server. Same as `manage.py run_huey` with OMLX_REDIS_URL set. "
        "SIGINT or SIGTERM: running requests are aborted and the worker exits. Logs: the console, and "
        "JSON lines in $OMLX_HOME/logs/worker-PID.log.",
    )
    worker.add_argument("--redis-url", default=None, help="the server's Redis (default $OMLX_REDIS_URL)")
    worker.add_argument("--threads", type=int, default=None,
                        help="Huey worker threads; a thread is busy only while a request starts "
                        "(model loading) (default 2)")
    _add_model_flags(worker)

    build = sub.add_parser(
        "build-model",
        help="write a model folder with random weights (for tests and benchmarks)",
        description="Write a Hugging Face model folder with random weights and a locally trained "
        "tokenizer (same as `manage.py build_test_model`).",
    )
    build.add_argument("out", help="the folder to write")
    build.add_argument("--arch", default="qwen2", help="llama, mistral, qwen2 or qwen3")
    build.add_argument("--preset", default="tiny", help="tiny, small or qwen2.5-0.5b")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")

    _add_service_parser(sub)

    # `omlx service install` passes the flags it does not know on to `omlx serve`.
    args, extra = parser.parse_known_args(argv)
    if args.command == "service":
        return _service(parser, serve, args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "demo":
        return _demo(args)
    if args.command == "serve":
        return _serve(parser, args)
    if args.command == "worker":
        return _worker(parser, args)
    if args.command == "build-model":
        from inference.model_factory import build_model

        try:
            path = build_model(args.out, arch=args.arch, preset=args.preset, seed=args.seed, dtype=args.dtype)
        except ValueError as exc:
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
        each.add_argument("--unit-dir", default=None,
                          help="write or look for the unit in this folder instead of the manager's "
                          "(nothing is started there)")
        each.add_argument("--manager", choices=("systemd", "launchd"), default=None,
                          help="the service manager (default: launchd on macOS, systemd elsewhere)")


def _service(parser, serve_parser, args, extra) -> int:
    from omlx_site import service

    serve_args = extra[1:] if extra[:1] == ["--"] else extra
    if serve_args and args.action != "install":
        parser.error(f"unrecognized arguments: {' '.join(serve_args)}")
    if serve_args:
        serve_parser.parse_args(serve_args)  # exits with serve's own message when a flag is wrong
    manager = service.service_for(args.manager or service.default_manager(), args.unit_dir)
    if args.action == "install":
        home = Path(os.environ.get("OMLX_HOME", Path.home() / ".omlx")).expanduser().resolve()
        grace = float(os.environ.get("OMLX_SHUTDOWN_GRACE_SECONDS") or 10)
        outcome = manager.install(service.serve_command(serve_args), home, stop_seconds=grace + 60)
    elif args.action == "uninstall":
        outcome = manager.uninstall()
    else:
        outcome = manager.status()
    for line in outcome.lines:
        print(line)
    return outcome.code


def _add_model_flags(parser) -> None:
    """Flags that shape the engines, shared by `serve` and `worker`."""
    parser.add_argument("--model-dir", action="append",
                        help="folder of model folders, at depth 1 (name) or 2 (org/name); repeat it "
                        "for several (default $OMLX_HOME/models)")
    parser.add_argument("--max-model-memory", default=None,
                        help="memory for loaded models (weights + KV cache + hot cache, estimated "
                        "before loading): 32GB, 80%% of RAM, or 'disabled' (default 80%%)")
    parser.add_argument("--max-process-memory", default=None,
                        help="limit on the whole process when loading a model: a size, a "
                        "percentage of RAM, 'auto' (RAM minus 8 GiB) or 'disabled' (default auto)")
    parser.add_argument("--max-concurrent-requests", type=int, default=None,
                        help="requests prefilling or decoding at once, per model (default 16)")
    parser.add_argument("--hot-cache-max-size", default=None,
                        help="RAM for cached KV blocks, per model: bytes, 4GiB, 512MB or a percentage "
                        "of RAM such as 10%% (default 10%%)")
    parser.add_argument("--paged-ssd-cache-dir", default=None,
                        help="directory of the SSD tier of the KV cache, kept across restarts "
                        "(default $OMLX_HOME/cache; 'off' keeps blocks in RAM only)")
    parser.add_argument("--paged-ssd-cache-max-size", default=None,
                        help="cap on the SSD tier, all models together, e.g. 50GB (default: no cap)")
    parser.add_argument("--paged-ssd-cache-ttl", type=float, default=None,
                        help="remove SSD blocks nobody used for this many seconds (default: never)")


def _export_model_flags(parser, args) -> None:
    """Check the engine flags and export them: settings (and `manage.py run_huey`) read them from
    the environment."""
    from cache.sizes import parse_size
    from inference.engine import EngineConfig

    if args.model_dir:
        os.environ["OMLX_MODEL_DIR"] = os.pathsep.join(str(Path(d).expanduser().resolve()) for d in args.model_dir)
    if args.max_concurrent_requests is not None:
        try:
            EngineConfig(max_concurrent_requests=args.max_concurrent_requests)
        except ValueError as exc:
            parser.error(f"--max-concurrent-requests: {exc}")
        os.environ["OMLX_MAX_CONCURRENT_REQUESTS"] = str(args.max_concurrent_requests)
    if args.hot_cache_max_size is not None:
        try:
            EngineConfig(hot_cache_max_size=args.hot_cache_max_size)
        except ValueError as exc:
            parser.error(f"--hot-cache-max-size: {exc}")
        os.environ["OMLX_HOT_CACHE_MAX_SIZE"] = args.hot_cache_max_size
    from inference.pool.memory import auto_process_limit, parse_limit

    for flag, value, env, auto in (("--max-model-memory", args.max_model_memory, "OMLX_MAX_MODEL_MEMORY", None),
                                   ("--max-process-memory", args.max_process_memory, "OMLX_MAX_PROCESS_MEMORY",
                                    auto_process_limit())):
        if value is not None:
            try:
                parse_limit(value, flag.lstrip("-").replace("-", "_"), auto=auto)
            except ValueError as exc:
                parser.error(f"{flag}: {exc}")
            os.environ[env] = value
    if args.paged_ssd_cache_dir is not None:
        os.environ["OMLX_COLD_CACHE_DIR"] = args.paged_ssd_cache_dir
    if args.paged_ssd_cache_max_size is not None:
        try:
            os.environ["OMLX_COLD_CACHE_MAX_BYTES"] = str(parse_size(args.paged_ssd_cache_max_size, "size"))
        except ValueError as exc:
            parser.error(f"--paged-ssd-cache-max-size: {exc}")
    if args.paged_ssd_cache_ttl is not None:
        if args.paged_ssd_cache_ttl <= 0:
            parser.error("--paged-ssd-cache-ttl: must be > 0 seconds")
        os.environ["OMLX_COLD_CACHE_TTL_SECONDS"] = str(args.paged_ssd_cache_ttl)


def _export_redis_url(parser, url) -> None:
    if url is None:
        return
    if not url.startswith(("redis://", "rediss://", "unix://")):
        parser.error(f"--redis-url {url}: must start with redis://, rediss:// or unix://")
    os.environ["OMLX_REDIS_URL"] = url


def _serve(parser, args) -> int:
    from cache.sizes import parse_size
    from omlx_site.server import serve

    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: must be in [0, 65535]")
    _export_model_flags(parser, args)
    _export_redis_url(parser, args.redis_url)
    redis = bool(os.environ.get("OMLX_REDIS_URL"))
    if args.workers is not None:
        if args.workers < 0:
            parser.error(f"--workers {args.workers}: must be >= 0")
        if args.workers == 0 and not redis and os.environ.get("OMLX_API_HANDOFF", "huey") == "huey":
            parser.error("--workers 0 needs --redis-url (without Redis only the server's own workers "
                         "can run requests)")
        os.environ["OMLX_HUEY_WORKERS"] = str(args.workers)
    if args.max_request_size is not None:
        try:
            size = parse_size(args.max_request_size, "size")
        except ValueError as exc:
            parser.error(f"--max-request-size: {exc}")
        if size < 1024:
            parser.error(f"--max-request-size {args.max_request_size}: must be at least 1KiB")
        os.environ["OMLX_MAX_REQUEST_BYTES"] = str(size)
    if args.max_queued_requests is not None:
        if args.max_queued_requests < 0:
            parser.error(f"--max-queued-requests {args.max_queued_requests}: must be >= 0")
        os.environ["OMLX_MAX_QUEUED_REQUESTS"] = str(args.max_queued_requests)
    if args.api_key:
        os.environ["OMLX_API_KEY"] = args.api_key
    return serve(args.host, args.port)


def _worker(parser, args) -> int:
    from omlx_site.worker import run_worker

    _export_model_flags(parser, args)
    _export_redis_url(parser, args.redis_url)
    if not os.environ.get("OMLX_REDIS_URL"):
        parser.error("omlx worker needs --redis-url (or OMLX_REDIS_URL): the server's Redis")
    threads = 2 if args.threads is None else args.threads
    if threads < 1:
        parser.error(f"--threads {threads}: must be >= 1")
    return run_worker(threads)


def _demo(args) -> int:
    from inference import platform
    from inference.demo_model import demo_model_path
    from inference.engine import LLM, ModelLoadError, SamplingParams

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
        print(f"\n\n{final.usage.prompt_tokens} prompt tokens, {n} generated ({final.finish_reason}); "
              f"first token after {first - start:.3f} s, {decode:.1f} tokens/s after it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
