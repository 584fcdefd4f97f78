"""The Status page's sampler (admin_panel/history.py) over the real pool, engine and metrics:
requests run through the worker's code path (``run_job``) with their events observed as the view
observes them, and the points follow."""

import queue
import shutil
import time
import uuid

import pytest
from django.test import override_settings

from admin_panel.history import History, percentile
from inference.generation import GenerationJob, run_job
from inference.metrics import GenerationObserver
from inference.pool import close_pool, get_pool


@pytest.fixture
def pool(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("history-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    with override_settings(OMLX_MODEL_DIR=models, OMLX_MODEL_DIRS=[models], OMLX_API_HANDOFF="direct"):
        yield get_pool()
    close_pool()


def generate(content: str, max_tokens: int = 4) -> dict:
    """One chat request through the worker's path; its events go through a GenerationObserver
    (as the view's subscription does). Returns the last event."""
    job = GenerationJob(
        f"hist-{uuid.uuid4().hex}",
        "tiny",
        {"max_tokens": max_tokens, "ignore_eos": True},
        messages=[{"role": "user", "content": content}],
    )
    events = queue.SimpleQueue()
    observer = GenerationObserver(job.model, job.n)
    run_job(job, lambda request_id, event: events.put(event))
    while True:
        event = events.get(timeout=60)
        observer.observe(event)
        assert event["kind"] != "error", event
        if event.get("finish_reason") is not None:
            return event


def test_points_follow_the_requests(pool):
    history = History(pool=pool)
    first = history.sample()
    assert first.tokens_per_second is None and first.hot_hit_rate is None  # nothing to compare yet
    prompt = "The quick brown fox jumps over the lazy dog. " * 8
    generate(prompt)
    generate(prompt)  # the same prompt again: hot hits
    time.sleep(0.01)  # the interval must have a length
    point = history.sample()
    assert point.loaded_models == 1 and list(point.models) == ["tiny"]
    assert point.models["tiny"] > 0
    assert point.model_memory_used >= point.models["tiny"]
    assert point.model_memory_limit == pool.max_model_memory
    assert point.process_memory > 0
    assert point.requests - first.requests == 2
    assert point.tokens_per_second > 0
    assert point.ttft_p50 is not None and point.ttft_p95 >= point.ttft_p50 > 0
    assert 0 < point.hot_hit_rate <= 1
    assert point.tokens_saved > first.tokens_saved
    assert point.running == point.waiting == 0

    quiet = history.sample()  # an interval without requests
    assert quiet.tokens_per_second == 0
    assert quiet.ttft_p50 is None and quiet.hot_hit_rate is None
    assert quiet.tokens_saved == point.tokens_saved  # cumulative
    assert [p.at for p in history.points()] == [first.at, point.at, quiet.at]


def test_tokens_saved_survive_an_unload(pool):
    history = History(pool=pool)
    prompt = "A prompt that is cached before the model is unloaded. " * 6
    generate(prompt)
    generate(prompt)
    before = history.sample()
    assert before.tokens_saved > 0
    pool.unload("tiny")
    after = history.sample()
    assert after.loaded_models == 0 and after.models == {}
    assert after.tokens_saved == before.tokens_saved


def test_keeps_the_last_points():
    history = History(keep=3, pool=None)
    points = [history.sample() for _ in range(5)]
    assert history.points() == points[-3:]
    assert history.latest() == points[-1]


def test_the_thread_samples_and_stops():
    history = History(interval=0.02, pool=None)
    history.start()
    history.start()  # once
    deadline = time.monotonic() + 30
    while len(history.points()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(history.points()) >= 3
    assert history._thread.daemon
    history.stop()
    assert not history.running()
    count = len(history.points())
    time.sleep(0.1)
    assert len(history.points()) == count


def test_percentile():
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(range(101)), 95) == 95
    assert percentile([5.0, 1.0], 0) == 1.0
