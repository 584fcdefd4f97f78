"""GET /health on a real `omlx serve`: 200 with each model's state, without the API key and
without anything secret; 503 while a SIGTERM's grace period runs (a stream kept going meanwhile).
In-process: 503 "starting" for as long as the pinned models load (a live server whose pinned model
loads after it listens is in tests/live/test_model_pool_live.py), 503 "unavailable" with no worker."""

import json
import shutil
import signal
from importlib.metadata import version

import httpx
import pytest

from tests.support.server import ServerProcess

KEY = "sk-health-secret"


@pytest.fixture
def models(tmp_path, model_dir):
    folder = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), folder / "tiny")
    return folder


def test_health_needs_no_key_and_tells_nothing_secret(tmp_path, models):
    home = tmp_path / "home"
    server = ServerProcess(["--model-dir", str(models), "--api-key", KEY], home)
    try:
        assert httpx.get(server.url + "/v1/models").status_code == 401  # the key is required there
        health = httpx.get(server.url + "/health")
        assert health.status_code == 200, health.text
        assert health.json() == {"status": "ok", "version": version("omlx"), "models": {"tiny": "unloaded"}}
        assert health.headers["cache-control"] == "no-store"
        for secret in (KEY, str(models), str(home)):
            assert secret not in health.text
        reply = httpx.post(
            server.url + "/v1/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        assert httpx.get(server.url + "/health").json()["models"] == {"tiny": "loaded"}
        assert httpx.head(server.url + "/health").status_code == 200
        refused = httpx.post(server.url + "/health")
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
    finally:
        assert server.stop() == 0


def test_health_is_503_while_shutting_down(tmp_path, models, monkeypatch):
    monkeypatch.setenv("OMLX_SHUTDOWN_GRACE_SECONDS", "600")
    server = ServerProcess(["--model-dir", str(models)], tmp_path / "home")
    during = None
    events = []
    try:
        body = {"model": "tiny", "prompt": "Go on", "max_tokens": 300, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 5:
                    server.process.send_signal(signal.SIGTERM)
                    assert server.wait_for_output("not taking new requests")
                    during = httpx.get(server.url + "/health", timeout=30)
    finally:
        code = server.stop()
    assert code == 0
    assert during.status_code == 503
    assert during.json()["status"] == "shutting_down" and during.json()["models"] == {"tiny": "loaded"}
    # The stream the shutdown waited for ran to its end meanwhile.
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"


def test_starting_lasts_until_the_pinned_models_are_loaded(tmp_path, model_dir):
    from django.test import Client

    from inference import lifecycle
    from inference.pool import ModelPool, model_settings
    from omlx_site.server import _load_pinned

    shutil.copytree(model_dir("qwen2", "tiny"), tmp_path / "models" / "tiny")
    seen = []

    class ObservedPool(ModelPool):  # the real pool; notes what /health would say as loading starts
        def load_pinned(self):
            seen.append((lifecycle.starting(), Client().get("/health").json()["status"]))
            return super().load_pinned()

    pinned = {"tiny": {**model_settings.defaults(), "pinned": True}}
    pool = ObservedPool(
        [tmp_path / "models"],
        {"hot_cache_max_size": "1MB", "paged_ssd_cache_dir": None},
        read_settings=lambda: pinned,
    )
    lifecycle.begin_start()  # what `omlx serve` does before it listens
    try:
        _load_pinned(pool)
        assert seen == [(True, "starting")]
        assert not lifecycle.starting() and pool.states() == {"tiny": "loaded"}
        # No Huey consumer runs in this test process: no worker can take a request.
        after = Client().get("/health")
        assert after.status_code == 503
        assert (after.json()["status"], after.json()["detail"]) == (
            "unavailable",
            "No worker is running in this server",
        )
    finally:
        lifecycle.end_start()
        pool.close()
