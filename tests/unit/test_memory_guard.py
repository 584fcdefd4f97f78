"""The memory guard's policy with real components: a real pool of three tiny models with real
engines, block caches and a cold tier. The one boundary set by the test is the memory reading
(``Reading``: a `Bound` the test moves); tests/live/test_memory_guard_live.py puts a real server
under a real OS limit.

The order under pressure: refuse new requests (high), then, one step per poll while critical,
preempt half of the running requests, then halve the hot tier, then unload the least recently
used idle model that is not pinned. Back to normal: engines admit again, the hot tier gets its
budget back, and every preempted request ends with the tokens it would have had without the
pressure.
"""

import shutil

import pytest

from cache.sizes import parse_size

from inference.engine import SamplingParams
from inference.pool import ModelPool
from inference.pool.memory_guard import CRITICAL, HIGH, NORMAL, MemoryGuard, MemoryPressure
from inference.pool.memory_reading import Bound

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 1000
PROMPTS = [[5 + (i * 7 + j * 3) % 900 for j in range(40 + 9 * i)] for i in range(4)]
PARAMS = SamplingParams(max_tokens=2000, temperature=0.0, ignore_eos=True)


class Reading:
    """The memory reading the guard polls: the share of a 1000-byte limit in use, set by the test."""

    def __init__(self):
        self.used = 0

    def set(self, share: float) -> None:
        self.used = int(share * LIMIT)

    def __call__(self) -> Bound:
        return Bound("test", self.used, LIMIT)


@pytest.fixture
def pool(tmp_path, model_dir):
    models = tmp_path / "models"
    for model_id in ("a", "b", "c"):
        shutil.copytree(model_dir("qwen2", "tiny"), models / model_id)
    settings = {
        "max_concurrent_requests": 4,
        "hot_cache_max_size": "8MB",
        "cache_block_size": 16,
        "paged_ssd_cache_dir": str(tmp_path / "cold"),
    }
    pool = ModelPool([models], settings)
    yield pool
    pool.close()


def sync(engine, steps: int = 2) -> None:
    """Return after the engine has drained its inbox and run ``steps - 1`` more steps."""
    for _ in range(steps):
        engine.call(lambda e: None, timeout=60)


def queue(engine):
    return engine.call(lambda e: (len(e.scheduler.running), len(e.scheduler.waiting)), timeout=60)


def hot_bytes(engine):
    return engine.call(lambda e: e.prefix_cache.hot.used_bytes, timeout=60)


def test_the_policy_order_and_recovery(pool):
    a = pool.engine("a")
    reference = [
        [t for event in stream for t in event.token_ids] for stream in [a.submit(p, PARAMS) for p in PROMPTS]
    ]
    pool.engine("b")  # idle, not pinned: the one to unload
    pool.engine("c")
    # The cold tier's writer stores a's blocks' rows from its own thread; the tests' in-memory
    # SQLite (shared cache) fails a concurrent write at once ("database table is locked": it has
    # no busy wait, where the server's file database waits up to its timeout), so it drains first.
    a.call(lambda e: e.prefix_cache.cold.flush(), timeout=60)
    pool.update_settings("c", {"pinned": True})  # idle but pinned: never unloaded
    reading = Reading()
    guard = MemoryGuard(pool, high=0.8, critical=0.9, read=reading)

    streams = [a.submit(p, PARAMS) for p in PROMPTS]
    while queue(a)[0] < 4:
        pass
    reading.set(0.5)
    assert guard.check() is None and guard.state.level == NORMAL
    guard.admit()  # admitted

    reading.set(0.85)
    assert guard.check() is None and guard.state.level == HIGH
    with pytest.raises(MemoryPressure) as refused:
        guard.admit()
    assert refused.value.retry_after >= 1
    assert "short of memory (test: 850 B of 1000 B in use, 85%)" in str(refused.value)

    reading.set(0.95)
    steps = []
    for _ in range(40):
        steps.append(guard.check())
        sync(a)
        if steps[-1] is None:
            break
    assert guard.state.level == CRITICAL
    shrinks = steps.count("shrink")
    assert steps == ["preempt", "preempt"] + ["shrink"] * shrinks + ["unload", None], steps
    assert shrinks >= 1
    running, waiting = queue(a)
    assert (running, waiting) == (1, 3)  # held: the preempted wait, the most urgent one goes on
    assert hot_bytes(a) == 0
    assert pool.loaded("b") is None and pool.loaded("a") is a and pool.loaded("c") is not None
    counts = guard.snapshot()["counts"]
    assert counts == {"reject": 1, "preempt": 3, "shrink": shrinks, "unload": 1}

    sync(a, 5)
    assert queue(a) == (1, 3)  # still held while the pressure lasts

    reading.set(0.5)
    assert guard.check() is None and guard.state.level == NORMAL
    outputs = [[t for event in stream for t in event.token_ids] for stream in streams]
    assert outputs == reference  # preempted and resumed: the same tokens
    assert a.call(lambda e: e.prefix_cache.hot.capacity_bytes) == parse_size("8MB")
    assert a.call(lambda e: e.scheduler.num_memory_preemptions) == 3
    guard.admit()


def test_levels_fall_only_below_the_margin(pool):
    reading = Reading()
    guard = MemoryGuard(pool, high=0.8, critical=0.9, read=reading)
    for share, level in (
        (0.79, NORMAL),
        (0.8, HIGH),
        (0.78, HIGH),
        (0.76, NORMAL),
        (0.9, CRITICAL),
        (0.88, CRITICAL),
        (0.86, HIGH),
        (0.6, NORMAL),
    ):
        reading.set(share)
        guard.check()
        assert guard.state.level == level, share


def test_bad_thresholds_are_refused(pool):
    with pytest.raises(ValueError, match="high"):
        MemoryGuard(pool, high=0.95, critical=0.9)
    with pytest.raises(ValueError, match="interval"):
        MemoryGuard(pool, interval=0)


def test_an_embedding_model_is_left_alone_then_unloaded_when_idle(tmp_path, model_dir):
    """An embedding engine has no KV cache to hold or shrink and no memory_critical flag: the
    guard polls past it and, under pressure with nothing running, unloads it like any idle model
    (the pinned chat model stays)."""
    models = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "chat")
    shutil.copytree(model_dir("bert_embedding", "tiny"), models / "embed")
    pool = ModelPool(
        [models],
        {
            "max_concurrent_requests": 2,
            "hot_cache_max_size": "1MB",
            "paged_ssd_cache_dir": str(tmp_path / "cold"),
        },
    )
    try:
        embed = pool.engine("embed")
        pool.engine("chat")
        pool.update_settings("chat", {"pinned": True})
        reading = Reading()
        guard = MemoryGuard(pool, high=0.8, critical=0.9, read=reading)
        reading.set(0.5)
        assert guard.check() is None and guard.state.level == NORMAL
        assert embed.submit([([101, 7, 102], None)]).result(timeout=60).shape[0] == 1
        reading.set(0.85)  # nothing runs: relieved as when critical
        assert guard.check() == "unload" and guard.state.level == HIGH
        assert pool.loaded("embed") is None and pool.loaded("chat") is not None
        reading.set(0.5)
        assert guard.check() is None and guard.state.level == NORMAL
    finally:
        pool.close()


# -- the process's guard seen from the API, /metrics and the Status page (in process) -----------


@pytest.fixture
def process_guard(tmp_path, model_dir):
    """The process's guard over the API's pool, its reading set by the test."""
    from django.test import override_settings

    from inference.pool import close_pool, get_pool
    from inference.pool.memory_guard import start_guard, stop_guard

    models = tmp_path / "api-models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    reading = Reading()
    with override_settings(
        OMLX_MODEL_DIR=models,
        OMLX_MODEL_DIRS=[models],
        OMLX_API_KEY=None,
        OMLX_API_HANDOFF="direct",
        OMLX_MEMORY_GUARD=True,
        OMLX_MEMORY_GUARD_HIGH=0.8,
        OMLX_MEMORY_GUARD_CRITICAL=0.9,
        OMLX_MEMORY_GUARD_INTERVAL=60.0,
        OMLX_RETRY_AFTER_SECONDS=3,
    ):
        guard = start_guard(get_pool(), read=reading)
        try:
            yield guard, reading
        finally:
            stop_guard()
            close_pool()


def post(path, body):
    import asyncio
    import json

    from django.test import AsyncClient

    async def go():
        response = await AsyncClient().post(path, json.dumps(body), content_type="application/json")
        if response.streaming:
            return response, "".join([part.decode() async for part in response.streaming_content])
        return response, json.loads(response.content)

    return asyncio.run(go())


CHAT = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def test_the_api_refuses_with_retry_after_in_both_shapes(process_guard):
    guard, reading = process_guard
    reading.set(0.5)
    guard.check()
    response, _ = post("/v1/chat/completions", CHAT)
    assert response.status_code == 200

    reading.set(0.85)
    guard.check()
    response, body = post("/v1/chat/completions", CHAT)
    assert response.status_code == 503 and response["Retry-After"] == "3"
    assert body["error"]["code"] == "memory_pressure" and body["error"]["type"] == "server_error"
    assert body["error"]["message"].startswith("The server is short of memory (test: 850 B of 1000 B")
    response, body = post("/v1/messages", CHAT)
    assert response.status_code == 503 and response["Retry-After"] == "3"
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    assert "short of memory" in body["error"]["message"]
    response, _ = post("/v1/chat/completions", dict(CHAT, stream=True))
    assert response.status_code == 503 and response["Retry-After"] == "3"

    reading.set(0.5)
    guard.check()
    response, _ = post("/v1/chat/completions", CHAT)
    assert response.status_code == 200


def test_metrics_and_status_page_show_the_guard(process_guard):
    from django.test import Client

    from inference import metrics

    guard, reading = process_guard
    reading.set(0.85)
    guard.check()
    post("/v1/chat/completions", CHAT)  # refused
    text = metrics.render().decode()
    assert "omlx_memory_guard_enabled 1.0" in text
    assert "omlx_memory_pressure_level 1.0" in text
    assert 'omlx_memory_pressure_ratio{source="test"} 0.85' in text
    assert 'omlx_memory_guard_limit_bytes{source="test"} 1000.0' in text
    assert 'omlx_memory_guard_actions_total{action="reject"} 1.0' in text
    html = Client().get("/admin/status/").content.decode()
    assert '<span id="status-pressure">high</span>' in html
    assert 'id="status-pressure-free">150 B</span> free of 1000 B' in html
    assert '<span id="status-guard-reject">1</span>' in html


# -- the readings of real OS limits (a child process under each) ---------------------------------

READ_CHILD = (
    "import json, sys; sys.path.insert(0, {root!r}); from inference.pool import memory_reading as m; "
    "print(json.dumps({{b.source: [b.used, b.limit] for b in m.all_bounds()}}))"
)


def read_in_child(preexec):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", READ_CHILD.format(root=root)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_rlimit_as_is_read():
    import resource

    limit = 3 * 2**30
    bounds = read_in_child(lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    used, read_limit = bounds["rlimit-as"]
    assert read_limit == limit and 0 < used < limit


def test_a_cgroup_limit_is_read():
    from tests.support.memory_limit import MemoryLimit

    limit = MemoryLimit(300 * 2**20)
    try:
        if limit.folder is None:
            pytest.skip("no writable memory cgroup here")
        used, read_limit = read_in_child(limit.preexec)["cgroup"]
        assert read_limit == 300 * 2**20 and 0 < used < read_limit
    finally:
        limit.close()
