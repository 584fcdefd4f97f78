"""The ``omlx`` command line (upstream oMLX's): serve, demo, build-model; pull, models and cache
live in omlx_site/commands/."""
from __future__ import annotations

import argparse
import os
import sys
import time


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
        "built-in demo model (random weights).",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--model-dir", help="folder of model folders (default $OMLX_HOME/models)")
    serve.add_argument("--max-concurrent-requests", type=int, default=None,
                       help="requests prefilling or decoding at once, per model (default 16)")
    serve.add_argument("--api-key", help="require this key (Authorization: Bearer KEY or x-api-key)")
    serve.add_argument("--hot-cache-max-size", default=None,
                       help="RAM for cached KV blocks, per model: bytes, 4GiB, 512MB or a percentage "
                       "of RAM such as 10%% (default 10%%)")
    serve.add_argument("--paged-ssd-cache-dir", default=None,
                       help="directory of the SSD tier of the KV cache, kept across restarts "
                       "(default $OMLX_HOME/cache; 'off' keeps blocks in RAM only)")
    serve.add_argument("--paged-ssd-cache-max-size", default=None,
                       help="cap on the SSD tier, all models together, e.g. 50GB (default: no cap)")
    serve.add_argument("--paged-ssd-cache-ttl", type=float, default=None,
                       help="remove SSD blocks nobody used for this many seconds (default: never)")

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

    from omlx_site.commands import add_parsers

    add_parsers(sub)  # pull, models, cache (omlx_site/commands/)

    args = parser.parse_args(argv)
    if hasattr(args, "run"):
        return args.run(args)
    if args.command == "demo":
        return _demo(args)
    if args.command == "serve":
        return _serve(parser, args)
    if args.command == "build-model":
        from inference.model_factory import build_model

        try:
            path = build_model(args.out, arch=args.arch, preset=args.preset, seed=args.seed, dtype=args.dtype)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"wrote {path}")
        return 0
    return 2


def _serve(parser, args) -> int:
    from inference.engine import EngineConfig
    from omlx_site.server import serve

    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: must be in [0, 65535]")
    if args.max_concurrent_requests is not None:
        try:
            EngineConfig(max_concurrent_requests=args.max_concurrent_requests)
        except ValueError as exc:
            parser.error(f"--max-concurrent-requests: {exc}")
    # The cache flags reach settings (and `manage.py run_huey`) through the environment.
    from cache.sizes import parse_size

    if args.hot_cache_max_size is not None:
        try:
            EngineConfig(hot_cache_max_size=args.hot_cache_max_size)
        except ValueError as exc:
            parser.error(f"--hot-cache-max-size: {exc}")
        os.environ["OMLX_HOT_CACHE_MAX_SIZE"] = args.hot_cache_max_size
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
    return serve(args.host, args.port, args.model_dir, args.max_concurrent_requests, args.api_key)


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
