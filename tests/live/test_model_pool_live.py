"""The model pool through a live `omlx serve` and the OpenAI SDK: two model directories, a model
larger than the whole limit (507), the status, load / unload and settings routes, an alias and
settings changes applied without a restart."""

import json
import shutil
import time

import httpx
import openai
import pytest

from inference.pool.memory import estimate
from tests.support.server import ServerProcess

SERVER_ENGINE = {"max_concurrent_requests": 16, "hot_cache_max_size": "1MB"}  # as the server's flags
JSON_TYPE = {"content-type": "application/json"}


def model_estimate(path):
    config = json.loads((path / "config.json").read_text())
    return estimate(sorted(path.glob("*.safetensors")), config, SERVER_ENGINE).total_bytes


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    first, second = tmp_path_factory.mktemp("dir-one"), tmp_path_factory.mktemp("dir-two")
    shutil.copytree(model_dir("qwen2", "tiny"), first / "tiny")
    shutil.copytree(model_dir("qwen2", "small"), second / "acme" / "big")
    embed = second / "acme" / "minilm"
    embed.mkdir()
    (embed / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (embed / "modules.json").write_text("[]")
    (embed / "model.safetensors").write_bytes(b"")
    tiny, big = model_estimate(first / "tiny"), model_estimate(second / "acme" / "big")
    assert tiny * 2 < big
    limit = tiny * 2  # tiny fits; big is larger than the whole limit
    proc = ServerProcess(
        [
            "--model-dir",
            str(first),
            "--model-dir",
            str(second),
            "--hot-cache-max-size",
            "1MB",
            "--max-model-memory",
            str(limit),
        ],
        tmp_path_factory.mktemp("pool-home"),
    )
    proc.limit, proc.big, proc.dirs = limit, big, (first, second)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def test_models_list_and_status(server, client):
    assert sorted(m.id for m in client.models.list().data) == ["acme/big", "tiny"]
    status = httpx.get(server.url + "/v1/models/status").json()
    rows = {row["id"]: row for row in status["data"]}
    assert rows["acme/minilm"]["type"] == "embedding" and not rows["acme/minilm"]["servable"]
    assert rows["acme/minilm"]["reason"].startswith("no tokenizer")
    assert rows["acme/big"]["memory_estimate"]["total_bytes"] == server.big
    assert rows["tiny"]["size_bytes"] > 0 and rows["tiny"]["type"] == "llm"
    assert status["memory"]["max_model_memory"] == server.limit
    with pytest.raises(openai.NotFoundError) as exc:  # listed, and the request says why not
        client.completions.create(model="acme/minilm", prompt="hello", max_tokens=1)
    assert "no tokenizer" in str(exc.value)


def test_a_model_larger_than_the_limit_gets_507(server, client):
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(
            model="acme/big", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert exc.value.status_code == 507
    message = exc.value.body["message"] if isinstance(exc.value.body, dict) else str(exc.value)
    assert "acme/big" in message and "limit" in message and "MiB" in message
    response = httpx.post(server.url + "/v1/models/acme/big/load", timeout=60)
    assert response.status_code == 507 and "error" in response.json()
    # the server is fine: the small model still serves
    reply = client.completions.create(model="tiny", prompt="hello", max_tokens=2)
    assert reply.usage.completion_tokens == 2


def test_load_unload_and_settings_without_restart(server, client):
    url = server.url + "/v1/models"
    assert httpx.post(url + "/tiny/load", timeout=120).json()["loaded"] is True
    assert httpx.post(url + "/tiny/unload", timeout=120).json()["loaded"] is False
    assert httpx.post(url + "/nope/load").status_code == 404
    assert httpx.post(url + "/acme/minilm/load").status_code == 400

    patch = httpx.patch(url + "/tiny/settings", json={"alias": "fast", "max_tokens": 3})
    assert patch.status_code == 200 and patch.json()["alias"] == "fast"
    assert httpx.get(url + "/fast/settings").json()["max_tokens"] == 3
    reply = client.completions.create(model="fast", prompt="hello", extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 3  # the model's default, set a moment ago
    assert reply.model == "fast"

    bad = httpx.patch(url + "/tiny/settings", json={"top_p": 7})
    assert bad.status_code == 400 and "top_p" in bad.json()["error"]["message"]
    assert httpx.patch(url + "/tiny/settings", json={"color": 1}).status_code == 400
    assert httpx.patch(url + "/tiny/settings", content=b"{nope", headers=JSON_TYPE).status_code == 400
    assert httpx.patch(url + "/tiny/settings", json={"max_tokens": None, "alias": None}).status_code == 200
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="fast", prompt="hello", max_tokens=1)


def test_pinned_model_loads_at_start_and_settings_survive_a_restart(tmp_path, model_dir):
    models, home = tmp_path / "models", tmp_path / "home"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    args = ["--model-dir", str(models), "--hot-cache-max-size", "1MB"]
    proc = ServerProcess(args, home)
    try:
        assert httpx.get(proc.url + "/v1/models/status").json()["data"][0]["loaded"] is False
        assert (
            httpx.patch(
                proc.url + "/v1/models/tiny/settings", json={"pinned": True, "alias": "mine"}
            ).status_code
            == 200
        )
    finally:
        proc.stop()
    proc = ServerProcess(args, home)
    try:
        # Pinned models load once the server listens; GET /health is 503 "starting" until then.
        while (health := httpx.get(proc.url + "/health")).status_code == 503:
            assert health.json()["status"] == "starting"
            time.sleep(0.05)
        assert health.json()["models"] == {"tiny": "loaded"}
        row = httpx.get(proc.url + "/v1/models/status").json()["data"][0]
        assert (row["loaded"], row["pinned"], row["alias"]) == (True, True, "mine")  # before any request
        assert httpx.post(proc.url + "/v1/models/tiny/unload").status_code == 409  # pinned
    finally:
        proc.stop()


def test_rescan(server, model_dir):
    first, _ = server.dirs
    shutil.copytree(model_dir("qwen2", "tiny"), first / "acme" / "later")
    ids = [row["id"] for row in httpx.post(server.url + "/v1/models/rescan").json()["data"]]
    assert "acme/later" in ids
    shutil.rmtree(first / "acme")
    assert "acme/later" not in [m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]]
