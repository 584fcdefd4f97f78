"""GET /metrics of a live `omlx serve` (API key set), read with prometheus_client's own parser:
the series change as real requests are served (OpenAI SDK), errors are counted by status, the
cache counters stay monotonic across an unload, and the key is required."""

import shutil
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import ServerProcess

KEY = "metrics-key"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("metrics-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    proc = ServerProcess(
        ["--model-dir", str(models), "--api-key", KEY], tmp_path_factory.mktemp("metrics-home")
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120) as c:
        yield c


class Scrape:
    """One /metrics answer: ``value(name, **labels)`` (0 when absent), ``has(name, **labels)``."""

    def __init__(self, text: str):
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def _find(self, name, labels):
        return [
            s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name, **labels) -> float:
        return sum(s.value for s in self._find(name, labels))

    def has(self, name, **labels) -> bool:
        return bool(self._find(name, labels))

    def since(self, before: "Scrape", name, **labels) -> float:
        """How much a series grew since the ``before`` scrape."""
        return self.value(name, **labels) - before.value(name, **labels)


def scrape(server) -> Scrape:
    response = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(response.text)


def chat(client, content, **kwargs):
    return client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": content}], **kwargs
    )


def test_the_key_is_required(server):
    response = httpx.get(server.url + "/metrics")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(server.url + "/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(server.url + "/metrics", headers={"x-api-key": KEY}).status_code == 200
    assert httpx.post(server.url + "/metrics", headers={"x-api-key": KEY}).status_code == 405


def test_requests_tokens_and_latencies(server, client):
    before = scrape(server)
    plain = chat(client, "Count to five.", max_tokens=6, extra_body={"ignore_eos": True})
    stream = chat(
        client,
        "Name three colours.",
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None][0]
    after = scrape(server)

    def delta(name, **labels):
        return after.since(before, name, **labels)

    assert delta("omlx_http_requests_total", endpoint=CHAT, method="POST", status="200") == 2
    assert plain.usage.completion_tokens + usage.completion_tokens == 11
    assert delta("omlx_generation_tokens_total", model="tiny") == 11
    assert delta("omlx_prompt_tokens_total", model="tiny") == plain.usage.prompt_tokens + usage.prompt_tokens
    assert delta("omlx_generations_total", model="tiny", finish_reason="length") == 2
    assert delta("omlx_time_to_first_token_seconds_count", model="tiny") == 2
    assert delta("omlx_time_to_first_token_seconds_sum", model="tiny") > 0
    # one gap per token after each choice's first: 5 + 4
    assert delta("omlx_inter_token_latency_seconds_count", model="tiny") == 9
    assert after.value("omlx_time_to_first_token_seconds_bucket", model="tiny", le="+Inf") == after.value(
        "omlx_time_to_first_token_seconds_count", model="tiny"
    )
    for phase in ("queue", "restore", "prefill", "prefill_wait", "decode"):  # one per finished choice
        assert delta("omlx_request_phase_seconds_count", model="tiny", phase=phase) == 2
    assert delta("omlx_request_phase_seconds_sum", model="tiny", phase="prefill") > 0
    assert delta("omlx_request_phase_seconds_sum", model="tiny", phase="decode") > 0
    assert after.value("omlx_model_loads_total", model="tiny") >= 1
    assert after.value("omlx_models_loaded") == 1
    assert after.value("omlx_model_memory_bytes", model="tiny") > 0
    assert after.value("omlx_model_memory_used_bytes") >= after.value("omlx_model_memory_bytes", model="tiny")
    assert after.has("omlx_requests_running", model="tiny") and after.has(
        "omlx_requests_waiting", model="tiny"
    )
    assert after.value("omlx_cache_bytes", model="tiny", tier="hot") > 0  # the prompts' KV blocks


def test_errors_are_counted_by_status(server, client):
    before = scrape(server)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    bad = httpx.post(
        server.url + CHAT,
        content=b"{not json",
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert bad.status_code == 400
    no_key = httpx.post(
        server.url + CHAT, json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert no_key.status_code == 401
    assert httpx.get(server.url + "/v1/no/such/route", headers={"x-api-key": KEY}).status_code == 404
    after = scrape(server)
    for status in ("404", "400", "401"):
        assert (
            after.since(before, "omlx_http_requests_total", endpoint=CHAT, method="POST", status=status) == 1
        )
    assert after.since(before, "omlx_http_requests_total", endpoint="(unmatched)", status="404") == 1
    assert not after.has("omlx_generation_tokens_total", model="no-such-model")  # no series for it
    assert after.since(before, "omlx_generation_tokens_total", model="tiny") == 0


def test_cache_hits_are_counted(server, client):
    prompt = "Tell me about the sea. " * 40
    before = scrape(server)
    chat(client, prompt, max_tokens=2)
    again = chat(client, prompt, max_tokens=2)
    after = scrape(server)
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached > 0
    hot = after.since(before, "omlx_cache_hit_tokens_total", model="tiny", tier="hot")
    assert hot >= cached
    assert after.since(before, "omlx_prompt_cached_tokens_total", model="tiny") >= cached
    looked = after.since(before, "omlx_cache_lookup_tokens_total", model="tiny")
    missed = after.since(before, "omlx_cache_miss_tokens_total", model="tiny", tier="hot")
    assert looked == hot + missed > 0


def test_queue_depth_while_a_request_runs(server, client):
    stream = chat(
        client, "Write a long story.", max_tokens=3000, stream=True, extra_body={"ignore_eos": True}
    )
    try:
        next(iter(stream))  # the request is running
        during = scrape(server)
    finally:
        stream.close()  # the client goes: the request is aborted
    assert during.value("omlx_api_requests_in_flight", model="tiny") >= 1
    assert (
        sum(during.value(name, model="tiny") for name in ("omlx_requests_running", "omlx_requests_waiting"))
        >= 1
    )
    assert wait_until_idle(server)  # the abort reaches the engine: the gauges go back to 0


def wait_until_idle(server, timeout=60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = scrape(server)
        if (
            now.value("omlx_api_requests_in_flight") == 0
            and now.value("omlx_requests_running") == 0
            and now.value("omlx_requests_waiting") == 0
        ):
            return True
        time.sleep(0.1)
    return False


def test_unload_is_counted_and_counters_stay_monotonic(server, client):
    chat(client, "Warm up the model.", max_tokens=2)
    before = scrape(server)
    response = httpx.post(server.url + "/v1/models/tiny/unload", headers={"x-api-key": KEY})
    assert response.status_code == 200, response.text
    unloaded = scrape(server)
    assert unloaded.since(before, "omlx_model_unloads_total", model="tiny", reason="manual") == 1
    assert unloaded.value("omlx_models_loaded") == 0
    assert not unloaded.has("omlx_model_memory_bytes", model="tiny")
    assert (
        unloaded.value("omlx_http_requests_total", endpoint="/v1/models/{model_id}/unload", status="200") >= 1
    )
    # the engine is gone; its cache counters are kept
    for name in ("omlx_cache_lookup_tokens_total", "omlx_cache_hit_tokens_total", "omlx_cache_lookups_total"):
        assert unloaded.value(name, model="tiny") == before.value(name, model="tiny") > 0
    chat(client, "Warm up the model.", max_tokens=2)  # loads it again, and hits the cold tier
    reloaded = scrape(server)
    assert reloaded.since(before, "omlx_model_loads_total", model="tiny") == 1
    assert reloaded.since(before, "omlx_cache_lookups_total", model="tiny") == 1
    assert reloaded.since(before, "omlx_cache_hit_tokens_total", model="tiny", tier="cold") > 0


def test_labels_stay_bounded(server):
    before = scrape(server)
    assert httpx.get(server.url + "/static/admin_panel/admin.css").status_code == 200
    assert httpx.get(server.url + "/static/no/such/file.css").status_code == 404
    httpx.request("BREW", server.url + "/v1/models", headers={"x-api-key": KEY})
    after = scrape(server)

    def delta(**labels):
        return after.since(before, "omlx_http_requests_total", **labels)

    assert delta(endpoint="/metrics", method="GET", status="200") == 1  # the first scrape
    assert delta(endpoint="/static/", status="200") == 1 and delta(endpoint="/static/", status="404") == 1
    assert delta(endpoint="/v1/models", method="other") == 1
    assert not after.has("omlx_http_requests_total", method="BREW")
