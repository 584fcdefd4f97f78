"""The Benchmark page's task in Redis mode: `omlx serve --redis-url` runs no worker of its own, the
benchmark runs in an `omlx worker` process, its progress reaches the channel layer group
``omlx.bench.<id>`` through Redis, and its results land in the shared database."""

import asyncio
import json
import sqlite3

import httpx
import pytest

from tests.live.test_bench import FORM, check_results, wait_for_status
from tests.live.test_redis_mode import redis_url, server, setup, start_worker  # noqa: F401  (fixtures)
from tests.support.redis_server import REDIS, SECRET

pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")


@pytest.fixture(scope="module")
def bench_worker(setup, server):  # noqa: F811
    worker = start_worker(setup)
    yield worker
    worker.stop()


async def follow(redis, run_id, start):
    """Join the run's group on Redis as the page's socket does, start the run, and collect its
    events until the last one."""
    from inference.dispatch.signed_layer import SignedRedisChannelLayer

    layer = SignedRedisChannelLayer(hosts=[redis], prefix="omlx", redis_secret=SECRET)
    channel = await layer.new_channel()
    await layer.group_add(f"omlx.bench.{run_id}", channel)
    events = []
    try:
        await asyncio.to_thread(start)
        while not events or events[-1]["kind"] != "finished":
            message = await asyncio.wait_for(layer.receive(channel), 180)
            events.append(message["event"])
    finally:
        await layer.flush()
    return events


def test_benchmark_runs_in_the_worker_process(setup, server, bench_worker):  # noqa: F811
    client = httpx.Client(base_url=server.url, timeout=60, headers={"HX-Request": "true"})
    client.get("/admin/benchmark/")
    client.headers["X-CSRFToken"] = client.cookies["omlx_csrftoken"]

    def start():
        response = client.post("/admin/benchmark/", data=FORM)
        assert response.status_code == 200 and "Benchmark #1 of tiny queued" in response.text, response.text

    events = asyncio.run(follow(setup["redis_url"], 1, start))
    progress = [e for e in events if e["kind"] == "progress"]
    assert [e["done"] for e in progress] == list(range(len(progress)))  # every step, in order
    assert progress[-1]["done"] == progress[-1]["total"] and events[-1]["status"] == "done"
    assert {e["worker"] for e in events} == {events[0]["worker"]}  # sent by the worker process
    home = setup["home"]
    row = wait_for_status(home, 1)
    assert row[1] == "done", row
    results = json.loads(row[3])
    assert results == events[-1]["results"]
    from inference.bench import BenchSettings

    check_results(
        results,
        BenchSettings(
            concurrency=(1, 2),
            prompt_tokens=32,
            gen_tokens=4,
            repeats=1,
            cache_prompt_tokens=128,
            cached_repeats=2,
            speculative="off",  # the form's default
        ),
    )
    with sqlite3.connect(home / "omlx.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM admin_panel_benchmarkrun").fetchone()[0] == 1
    assert any("benchmark #1 of tiny done" in line for line in bench_worker.output)
    client.close()


def test_a_run_of_a_killed_worker_is_marked_failed(setup, server, bench_worker):  # noqa: F811
    import signal
    import time

    from tests.live.test_bench import db_rows

    client = httpx.Client(base_url=server.url, timeout=60, headers={"HX-Request": "true"})
    client.get("/admin/benchmark/")
    client.headers["X-CSRFToken"] = client.cookies["omlx_csrftoken"]
    assert (
        client.post("/admin/benchmark/", data=dict(FORM, gen_tokens="2000", repeats="10")).status_code == 200
    )
    run_id = max(r[0] for r in db_rows(setup["home"]))
    wait_for_status(setup["home"], run_id, statuses=("running",))
    bench_worker.stop(signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the worker's heartbeat key expires after a few seconds
        assert client.get("/admin/benchmark/").status_code == 200
        row = next(r for r in db_rows(setup["home"]) if r[0] == run_id)
        if row[1] != "running":
            break
        time.sleep(0.5)
    assert row[1] == "failed" and "interrupted: the worker running it" in row[2], row
    client.close()
