"""Load test (slow; `make test-slow`): 32 streaming clients for 60 seconds against a live
`omlx serve` with the tiny model. Every request must succeed and every stream be complete and
well-formed; identical greedy requests must get identical text. Runs the embedded default and
Redis mode (one `omlx worker`). Prints the figures (requests, tokens/s, time to first token) and
writes them to $OMLX_LOAD_REPORT.<mode>.json when that is set (docs/benchmarks.md).

OMLX_LOAD_CLIENTS / OMLX_LOAD_SECONDS change the shape (defaults 32 and 60)."""

import json
import os
import shutil
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.server import ServerProcess
from tests.support.sse_client import stream_once

pytestmark = pytest.mark.slow

CLIENTS = int(os.environ.get("OMLX_LOAD_CLIENTS", "32"))
SECONDS = float(os.environ.get("OMLX_LOAD_SECONDS", "60"))
PROMPTS = [f"Client question number {i}: tell me about caching." for i in range(8)]


def run_load(url):
    """CLIENTS threads streaming for SECONDS; returns the report (asserts nothing)."""
    with httpx.Client(timeout=120) as warm:  # load the model, fix each prompt's greedy text
        expected = {p: stream_once(warm, url, p, False)[0] for p in PROMPTS}

    lock = threading.Lock()
    results = {"requests": 0, "tokens": 0, "ttft": [], "errors": []}
    deadline = time.monotonic() + SECONDS

    def client_loop(k):
        with httpx.Client(timeout=120) as client:
            i = k
            while time.monotonic() < deadline:
                prompt = PROMPTS[i % len(PROMPTS)]
                try:
                    text, ttft, usage = stream_once(client, url, prompt, include_usage=True)
                    assert text == expected[prompt], (prompt, text, expected[prompt])
                except Exception as exc:  # counted, then reported all at once
                    with lock:
                        results["errors"].append(repr(exc)[:300])
                else:
                    with lock:
                        results["requests"] += 1
                        results["tokens"] += usage["completion_tokens"]
                        if ttft is not None:
                            results["ttft"].append(ttft)
                i += 1

    started = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client_loop, range(CLIENTS)))
    elapsed = time.monotonic() - started
    ttft = sorted(results["ttft"])
    return {
        "clients": CLIENTS,
        "seconds": round(elapsed, 1),
        "requests": results["requests"],
        "errors": len(results["errors"]),
        "first_errors": results["errors"][:5],
        "completion_tokens": results["tokens"],
        "tokens_per_second": round(results["tokens"] / elapsed, 1),
        "requests_per_second": round(results["requests"] / elapsed, 2),
        "ttft_p50_s": round(statistics.median(ttft), 3) if ttft else None,
        "ttft_p95_s": round(ttft[int(0.95 * (len(ttft) - 1))], 3) if ttft else None,
    }


def check(report, mode):
    print(f"\nload test ({mode}):", json.dumps(report))
    if os.environ.get("OMLX_LOAD_REPORT"):
        with open(f"{os.environ['OMLX_LOAD_REPORT']}.{mode}.json", "w") as f:
            json.dump(report, f, indent=1)
    assert report["errors"] == 0, report["first_errors"]
    assert report["requests"] >= CLIENTS


@pytest.fixture
def served_models(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("load-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    return models


def test_32_streaming_clients_for_60_seconds(tmp_path_factory, served_models):
    server = ServerProcess(
        ["--model-dir", str(served_models), "--max-concurrent-requests", str(2 * CLIENTS)],
        tmp_path_factory.mktemp("load-home"),
    )
    try:
        report = run_load(server.url)
    finally:
        server.stop()
    check(report, "embedded")


def test_32_streaming_clients_for_60_seconds_redis_mode(tmp_path_factory, served_models):
    """The same load with the queue and the tokens going through Redis to one `omlx worker`."""
    import sys

    from tests.support.redis_server import REDIS, SECRET, Process, RedisServer

    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/install_system_deps.sh installs it)")
    redis = RedisServer(tmp_path_factory.mktemp("load-redis"))
    url = redis.url
    home = tmp_path_factory.mktemp("load-redis-home")
    flags = [
        "--redis-url",
        url,
        "--redis-secret",
        SECRET,
        "--model-dir",
        str(served_models),
        "--max-concurrent-requests",
        str(2 * CLIENTS),
    ]
    env = dict(
        os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"), PYTHONUNBUFFERED="1"
    )
    worker = server = None
    try:
        worker = Process(
            [sys.executable, "-m", "omlx_site.cli", "worker", *flags], env, "taking requests from"
        )
        server = ServerProcess(flags, home)
        report = run_load(server.url)
    finally:
        for process in (server, worker, redis):
            if process is not None:
                process.stop()
    check(report, "redis")
