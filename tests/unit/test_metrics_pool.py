"""The pool's series in inference.metrics with real engines: loads, failed loads, unloads by reason
(lru, ttl, manual, shutdown), the engine-side gauges, and cache counters that survive unloads."""

import json
import shutil
import time

import pytest

from inference import metrics
from inference.engine import SamplingParams
from inference.metrics import EngineCollector
from inference.pool import ModelPool

pytestmark = pytest.mark.django_db(transaction=True)


def sample(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def pool(tmp_path, model_dir):
    models = tmp_path / "models"
    for model_id in ("m-one", "m-two"):
        shutil.copytree(model_dir("qwen2", "tiny"), models / model_id)
    broken = models / "m-broken"
    shutil.copytree(model_dir("qwen2", "tiny"), broken)
    config = json.loads((broken / "config.json").read_text())
    config["intermediate_size"] *= 2  # the weights no longer fit the config: loading fails
    (broken / "config.json").write_text(json.dumps(config))
    settings = {
        "max_concurrent_requests": 2,
        "hot_cache_max_size": "1MB",
        "cache_block_size": 16,
        "paged_ssd_cache_dir": str(tmp_path / "cold"),
    }
    probe = ModelPool([models], settings)
    limit = probe.estimate("m-one").total_bytes * 3 // 2  # one model fits, not two
    pool = ModelPool([models], settings, max_model_memory=limit)
    yield pool
    pool.close()


def run(engine, prompt):
    return list(engine.submit(prompt, SamplingParams(max_tokens=2, temperature=0)))


def test_unloads_by_reason_and_failed_loads(pool):
    before = {
        reason: sample("omlx_model_unloads_total", model="m-one", reason=reason)
        for reason in metrics.UNLOAD_REASONS
    }
    loads = sample("omlx_model_loads_total", model="m-one")
    pool.engine("m-one")
    pool.engine("m-two")  # no room for both: m-one goes
    assert sample("omlx_model_unloads_total", model="m-one", reason="lru") == before["lru"] + 1
    pool.engine("m-one")  # and m-two goes
    assert sample("omlx_model_loads_total", model="m-one") == loads + 2
    assert sample("omlx_model_load_seconds_count", model="m-one") >= 2
    pool.update_settings("m-one", {"ttl_seconds": 1})
    assert pool.unload_idle(now=time.monotonic() + 5) == ["m-one"]
    assert sample("omlx_model_unloads_total", model="m-one", reason="ttl") == before["ttl"] + 1
    pool.engine("m-one")
    assert pool.unload("m-one")
    assert sample("omlx_model_unloads_total", model="m-one", reason="manual") == before["manual"] + 1
    pool.engine("m-one")
    pool.close()
    assert sample("omlx_model_unloads_total", model="m-one", reason="shutdown") == before["shutdown"] + 1

    failures = sample("omlx_model_load_failures_total", model="m-broken")
    with pytest.raises(Exception):
        ModelPool(pool.model_dirs, pool.engine_settings).engine("m-broken")
    assert sample("omlx_model_load_failures_total", model="m-broken") == failures + 1
    assert sample("omlx_model_loads_total", model="m-broken") == 0


def test_engine_series_follow_the_pool(pool):
    engine = pool.engine("m-one")
    prompt = list(range(10, 60))
    run(engine, prompt)
    run(engine, prompt)  # hot hits
    series = {
        s.name: s
        for f in EngineCollector()._cache_series()
        for s in f.samples
        if s.labels.get("model") == "m-one" and s.labels.get("tier", "hot") == "hot"
    }
    hot_hits = series["omlx_cache_hit_tokens_total"].value
    assert hot_hits > 0
    assert series["omlx_cache_bytes"].value > 0 and series["omlx_cache_blocks"].value > 0
    looked = series["omlx_cache_lookup_tokens_total"].value
    assert series["omlx_cache_miss_tokens_total"].value == looked - hot_hits
    assert {"m-one"} == set(pool.loaded_models())
    assert pool.loaded_models()["m-one"]["memory_bytes"] == pool.used_bytes()

    pool.engine("m-two")  # m-one unloaded (lru): its counts are kept, its gauges go
    after = {
        (s.name, s.labels.get("tier")): s.value
        for f in EngineCollector()._cache_series()
        for s in f.samples
        if s.labels.get("model") == "m-one"
    }
    assert after[("omlx_cache_hit_tokens_total", "hot")] == hot_hits
    assert after[("omlx_cache_lookup_tokens_total", None)] == looked
    assert ("omlx_cache_bytes", "hot") not in after
    totals = metrics.totals(pool)
    assert list(totals.models) == ["m-two"] and totals.hot_hit_tokens >= hot_hits
