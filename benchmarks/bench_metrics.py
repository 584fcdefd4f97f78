"""What /metrics costs, side by side in one run, in process (Django's AsyncClient):

middleware  GET /v1/models through the whole Django stack, with and without the request-counting
            middleware (omlx_site.middleware.request_metrics), in alternating rounds
observer    a streamed chat request's token events fed to a GenerationObserver (TTFT, ITL,
            tokens) against the same loop without it: the cost per token event
scrape      one GET /metrics with a model loaded

  .venv/bin/python benchmarks/bench_metrics.py [--requests N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")
os.environ.setdefault("OMLX_HOME", tempfile.mkdtemp(prefix="omlx-bench-metrics-"))

import inference  # noqa: E402,F401  (fast BLAS before mlx)


def time_requests(client, path: str, count: int) -> float:
    async def go():
        start = time.perf_counter()
        for _ in range(count):
            response = await client.get(path)
            assert response.status_code == 200, response.status_code
        return (time.perf_counter() - start) / count

    return asyncio.run(go())


def bench_middleware(count: int, rounds: int) -> tuple:
    from django.conf import settings
    from django.test import AsyncClient, override_settings

    without = [m for m in settings.MIDDLEWARE if m != "omlx_site.middleware.request_metrics"]
    with_times, without_times = [], []
    client = AsyncClient()
    time_requests(client, "/v1/models", 50)  # warm up
    for _ in range(rounds):
        with_times.append(time_requests(client, "/v1/models", count))
        with override_settings(MIDDLEWARE=without):
            without_times.append(time_requests(AsyncClient(), "/v1/models", count))
    return statistics.median(with_times), statistics.median(without_times)


def bench_observer(events: int) -> tuple:
    from inference.metrics import GenerationObserver

    stream = [{"kind": "delta", "index": 0, "text": "x", "token_ids": [7], "finish_reason": None}] * events
    stream[-1] = dict(
        stream[-1],
        finish_reason="length",
        usage={"prompt_tokens": 10, "completion_tokens": events, "cached_tokens": 0},
    )

    def run(observe: bool) -> float:
        observer = GenerationObserver("bench", 1)
        observer.observe({"kind": "accepted", "model": "bench", "prompt_tokens": [10]})
        sink = []
        start = time.perf_counter()
        for event in stream:
            if observe:
                observer.observe(event)
            sink.append(event["text"])
        return (time.perf_counter() - start) / events

    on = statistics.median(run(True) for _ in range(5))
    off = statistics.median(run(False) for _ in range(5))
    return on, off


def bench_scrape(count: int) -> float:
    import shutil

    from django.test import AsyncClient, override_settings

    from inference.testkit.registry import build_model
    from inference.pool import close_pool, get_pool

    models = Path(tempfile.mkdtemp(prefix="omlx-bench-models-"))
    build_model(models / "tiny", arch="qwen2", preset="tiny")
    close_pool()
    try:
        with override_settings(OMLX_MODEL_DIR=models, OMLX_MODEL_DIRS=[models], OMLX_API_KEY=None):
            get_pool().engine("tiny")
            return time_requests(AsyncClient(), "/metrics", count)
    finally:
        close_pool()
        shutil.rmtree(models, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    with_mw, without_mw = bench_middleware(args.requests, args.rounds)
    print(
        f"GET /v1/models  with the middleware {with_mw * 1e6:8.1f} us   without {without_mw * 1e6:8.1f} us"
        f"   ratio {with_mw / without_mw:.3f}"
    )
    on, off = bench_observer(20_000)
    print(
        f"token event     with the observer   {on * 1e6:8.2f} us   without {off * 1e6:8.2f} us"
        f"   added {(on - off) * 1e6:.2f} us per event"
    )
    print(f"GET /metrics    one tiny model loaded: {bench_scrape(100) * 1e3:.2f} ms per scrape")


if __name__ == "__main__":
    main()
