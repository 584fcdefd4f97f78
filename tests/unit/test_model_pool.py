"""The model pool with real engines: three tiny models under a limit that fits two. LRU eviction,
pins, requests in flight, TTL (directly and through Huey), unload writes blocks down to the cold
tier, per-model settings applied by the worker without a restart."""

import shutil
import threading

import pytest

from inference.engine import SamplingParams
from inference.generation import GenerationJob, run_job
from inference.pool import InsufficientMemory, ModelBusy, ModelPool
from tests.support.jobs import job_events

pytestmark = pytest.mark.django_db(transaction=True)

IDS = ("a", "org/b", "org/c")


@pytest.fixture
def pool_dirs(tmp_path, model_dir):
    models = tmp_path / "models"
    for model_id, arch in zip(IDS, ("qwen2", "llama", "qwen3")):
        shutil.copytree(model_dir(arch, "tiny"), models / model_id)
    return models, tmp_path / "cold"


def make_pool(pool_dirs, **kwargs):
    models, cold = pool_dirs
    settings = {
        "max_concurrent_requests": 2,
        "hot_cache_max_size": "1MB",
        "cache_block_size": 16,
        "paged_ssd_cache_dir": str(cold),
    }
    probe = ModelPool([models], settings)
    sizes = [probe.estimate(i).total_bytes for i in IDS]
    limit = sum(sizes) - min(sizes)  # any two fit, all three do not
    return ModelPool([models], settings, max_model_memory=limit, **kwargs), limit


def loaded(pool):
    return sorted(i for i in IDS if pool.loaded(i) is not None)


def test_least_recently_used_is_unloaded(pool_dirs):
    pool, limit = make_pool(pool_dirs)
    try:
        pool.engine("a")
        pool.engine("org/b")
        rows = {row["id"]: row for row in pool.status()["data"]}
        assert rows["a"]["measured_weights_bytes"] == rows["a"]["memory_estimate"]["weights_bytes"]
        pool.engine("a")  # a is now more recent than b
        assert loaded(pool) == ["a", "org/b"]
        pool.engine("org/c")
        assert loaded(pool) == ["a", "org/c"]
        assert pool.used_bytes() <= limit
        pool.engine("org/b")  # now a is the least recently used
        assert loaded(pool) == ["org/b", "org/c"]
    finally:
        pool.close()


def test_pinned_model_is_never_unloaded(pool_dirs):
    pool, _ = make_pool(pool_dirs)
    try:
        pool.update_settings("a", {"pinned": True})
        assert pool.load_pinned() == ["a"]
        pool.engine("org/b")
        pool.engine("org/c")  # a is the least recently used but pinned: b goes
        assert loaded(pool) == ["a", "org/c"]
        with pytest.raises(ModelBusy):
            pool.unload("a")
        pool.update_settings("org/c", {"pinned": True})
        with pytest.raises(InsufficientMemory) as exc:
            pool.engine("org/b")  # both loaded models are pinned
        message = str(exc.value)
        assert "org/b" in message and "pinned" in message and "MiB" in message
        assert loaded(pool) == ["a", "org/c"]
        pool.update_settings("org/c", {"pinned": False})
        pool.engine("org/b")
        assert loaded(pool) == ["a", "org/b"]
    finally:
        pool.close()


def test_model_with_a_request_in_flight_is_never_unloaded(pool_dirs):
    pool, _ = make_pool(pool_dirs)
    gate, started = threading.Event(), threading.Event()

    def hold(event):  # the engine thread waits here: the request stays in flight
        started.set()
        gate.wait(60)

    try:
        with pool.lease("a") as engine:
            engine.submit("hello there", SamplingParams(max_tokens=50, ignore_eos=True), callback=hold)
        assert started.wait(60)
        pool.engine("org/b")
        assert pool.loaded("a").num_active() == 1
        pool.engine("org/c")  # a is older but busy: b goes
        assert loaded(pool) == ["a", "org/c"]
        with pytest.raises(ModelBusy):
            pool.unload("a")
        pool.update_settings("a", {"ttl_seconds": 0.001})
        threading.Event().wait(0.01)
        assert pool.unload_idle() == []  # in flight: its TTL does not run
        # only c is idle now: it goes, the busy a stays
        pool.engine("org/b")
        assert loaded(pool) == ["a", "org/b"]
    finally:
        gate.set()
        pool.close()


def test_ttl_unloads_an_idle_model(pool_dirs, monkeypatch):
    from inference import pool as pool_module
    from inference import tasks

    pool, _ = make_pool(pool_dirs)
    monkeypatch.setattr(pool_module, "_pool", pool)  # the tasks act on this process's pool
    try:
        pool.engine("a")
        pool.engine("org/b")
        pool.update_settings("org/b", {"ttl_seconds": 0.001})
        threading.Event().wait(0.01)
        assert tasks.unload_idle_models() == ["org/b"]
        assert loaded(pool) == ["a"]  # no TTL: stays
        pool.update_settings("a", {"ttl_seconds": 0.001, "pinned": True})
        threading.Event().wait(0.01)
        assert tasks.unload_idle_models() == []  # pinned: stays
        pool.update_settings("a", {"pinned": False})
        threading.Event().wait(0.01)
        tasks.enforce_model_ttls.call_local()  # the Huey periodic task itself
        assert loaded(pool) == []
    finally:
        monkeypatch.setattr(pool_module, "_pool", None)
        pool.close()


def run(pool, model, prompt, monkeypatch, **params):
    """A completion job through the worker's run_job; its events."""
    from inference import pool as pool_module

    monkeypatch.setattr(pool_module, "_pool", pool)
    return job_events(model, prompt, **params)


def test_unloaded_model_prefix_comes_back_as_a_cold_hit(pool_dirs, monkeypatch):
    pool, _ = make_pool(pool_dirs)
    try:
        prompt = list(range(10, 90))  # 80 tokens: 5 blocks of 16
        first = run(pool, "a", prompt, monkeypatch, max_tokens=2, temperature=0)[-1]
        assert first["usage"]["cached_tokens"] == 0
        assert first["usage"]["hot_cached_tokens"] == first["usage"]["cold_cached_tokens"] == 0
        assert pool.unload("a")
        again = run(pool, "a", prompt, monkeypatch, max_tokens=2, temperature=0)[-1]
        assert again["usage"]["cached_tokens"] >= 64
        assert again["usage"]["cold_cached_tokens"] == again["usage"]["cached_tokens"]  # the split
        assert again["usage"]["hot_cached_tokens"] == 0
        stats = pool.loaded("a").call(lambda e: e.prefix_cache.stats)
        assert stats.cold_hit_tokens >= 64 and stats.hot_hit_tokens == 0
        hot = run(pool, "a", prompt, monkeypatch, max_tokens=2, temperature=0)[-1]["usage"]
        assert (
            hot["hot_cached_tokens"] >= 64
            and hot["cached_tokens"] == hot["hot_cached_tokens"] + hot["cold_cached_tokens"]
        )
    finally:
        monkeypatch.setattr(__import__("inference.pool", fromlist=["_pool"]), "_pool", None)
        pool.close()


def cold_written(pool, model_id):
    """Wait for the model's cold-tier writer: it stores its blocks' rows from its own thread, and
    the tests' in-memory SQLite (shared cache) fails a concurrent write of another thread at once
    ("database table is locked"), where the server's file database waits up to its timeout."""
    pool.loaded(model_id).call(lambda e: e.prefix_cache.cold.flush())


def test_settings_apply_without_restart(pool_dirs, monkeypatch):
    from inference import pool as pool_module

    pool, _ = make_pool(pool_dirs)
    try:
        prompt = list(range(10, 30))
        events = run(pool, "a", prompt, monkeypatch, ignore_eos=True)
        assert events[-1]["usage"]["completion_tokens"] == 256  # the engine's default max_tokens
        cold_written(pool, "a")
        pool.update_settings("a", {"max_tokens": 3, "alias": "fast"})
        events = run(pool, "fast", prompt, monkeypatch, ignore_eos=True)
        assert events[-1]["usage"]["completion_tokens"] == 3
        events = run(pool, "fast", prompt, monkeypatch, ignore_eos=True, max_tokens=5)
        assert events[-1]["usage"]["completion_tokens"] == 5  # the request's own value wins
        cold_written(pool, "a")
        pool.update_settings("a", {"context_length": 24})
        events = run(pool, "a", prompt, monkeypatch, ignore_eos=True, max_tokens=50)
        assert events[-1]["usage"]["completion_tokens"] == 4  # 20 prompt + 4 = the limit
        events = run(pool, "a", list(range(10, 40)), monkeypatch)
        assert events[-1]["kind"] == "error" and events[-1]["status"] == 400
        assert "context_length setting" in events[-1]["message"]
        with pytest.raises(ValueError):
            pool.update_settings("a", {"temperature": -1})
        with pytest.raises(ValueError):
            pool.update_settings("org/b", {"alias": "fast"})  # taken by a
        with pytest.raises(ValueError):
            pool.update_settings("org/b", {"alias": "a"})  # another model's id
        with pytest.raises(ValueError):
            pool.update_settings("a", {"colour": "red"})
    finally:
        monkeypatch.setattr(pool_module, "_pool", None)
        pool.close()


def test_scheduling_settings_per_model_apply_at_load_and_live(pool_dirs):
    """A model's max_batch_wait_ms / max_step_ms go over the server's when it loads, a loaded
    engine takes a change at once, a reset goes back to the server's value, bad values are
    refused before anything is saved."""
    pool, _ = make_pool(pool_dirs)
    try:
        pool.update_settings("a", {"max_batch_wait_ms": 250, "max_step_ms": 80})
        engine = pool.engine("a")
        assert (engine.config.max_batch_wait_ms, engine.config.max_step_ms) == (250, 80)
        assert pool.engine("org/b").config.max_batch_wait_ms == 0  # the server's
        pool.update_settings("a", {"max_step_ms": 15})
        engine.call(lambda e: None)  # the change was queued before this call: applied now
        assert (engine.config.max_batch_wait_ms, engine.config.max_step_ms) == (250, 15)
        assert engine.scheduler.config is engine.config
        pool.update_settings("a", {"max_batch_wait_ms": None, "max_step_ms": None})
        engine.call(lambda e: None)
        assert (engine.config.max_batch_wait_ms, engine.config.max_step_ms) == (0, 0)
        pool.update_settings("a", {"speculative": "lookup", "num_draft_tokens": 6})  # speculative decoding
        engine.call(lambda e: None)
        assert (engine.config.speculative, engine.runner.speculation.num_draft_tokens) == ("lookup", 6)
        for bad in (
            {"speculative": "ngram"},
            {"speculative": 1},
            {"num_draft_tokens": 0},
            {"num_draft_tokens": 2.5},
            {"max_step_ms": -5},
            {"max_batch_wait_ms": 10**9},
            {"max_step_ms": "fast"},
            {"max_batch_wait_ms": True},
        ):
            with pytest.raises(ValueError, match=next(iter(bad))):
                pool.update_settings("a", bad)
        assert pool.settings("a")["max_step_ms"] is None
    finally:
        pool.close()


def test_concurrent_first_requests_load_once(pool_dirs):
    pool, _ = make_pool(pool_dirs)
    got, errors = [], []

    def first_request():
        try:
            got.append(pool.engine("org/b"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=first_request) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and len(got) == 4
        assert len({id(e) for e in got}) == 1 and pool.loaded("org/b") is got[0]
    finally:
        pool.close()
    with pytest.raises(RuntimeError):
        pool.engine("a")  # closed


def test_process_memory_limit_refuses_before_loading(pool_dirs):
    from inference.pool.memory import process_rss

    rss = process_rss()
    if rss is None:
        pytest.skip("no way to read this process's resident memory here")
    models, cold = pool_dirs
    pool = ModelPool(
        [models],
        {"hot_cache_max_size": "1MB", "paged_ssd_cache_dir": str(cold)},
        max_process_memory=rss + 1024,
    )
    try:
        with pytest.raises(InsufficientMemory) as exc:
            pool.engine("a")
        assert "process memory limit" in str(exc.value)
        assert pool.loaded("a") is None and pool.used_bytes() == 0
    finally:
        pool.close()


def test_count_tokens_uses_the_model_settings(tmp_path, model_dir, monkeypatch):
    """POST /v1/messages/count_tokens renders with the model's chat_template_kwargs too, so its
    count stays equal to the prompt tokens the worker reports."""
    from inference import pool as pool_module
    from inference.api.anthropic.tokens import count_prompt_tokens

    shutil.copytree(model_dir("qwen3", "tiny"), tmp_path / "models" / "q")
    pool = ModelPool([tmp_path / "models"], {"hot_cache_max_size": "1MB", "paged_ssd_cache_dir": None})
    monkeypatch.setattr(pool_module, "_pool", pool)
    messages = [{"role": "user", "content": "hello"}]
    try:

        def counts():
            job = GenerationJob("count", "q", {"max_tokens": 1}, messages=messages)
            events = []
            run_job(job, lambda group, event: events.append(event))
            while not any(e.get("finish_reason") for e in events):
                threading.Event().wait(0.01)
            usage = [e for e in events if e.get("usage")][-1]["usage"]
            return count_prompt_tokens(job), usage["prompt_tokens"]

        counted, used = counts()
        assert counted == used
        pool.update_settings("q", {"chat_template_kwargs": {"enable_thinking": False}})
        counted_off, used_off = counts()
        assert counted_off == used_off and counted_off > counted  # the empty <think></think> block
    finally:
        monkeypatch.setattr(pool_module, "_pool", None)
        pool.close()
