"""LoRA adapters through a live `omlx serve` and the OpenAI SDK: adapter folders in the model
directory are listed by /v1/models with their base; requests to two adapters and the base,
admitted together into one batch, answer what each answers alone; and a cached prefix is never
shared between the base and an adapter, nor between two adapters."""

import shutil
import threading

import httpx
import openai
import pytest

from inference.testkit.adapters import build_adapter
from tests.support.server import ServerProcess

PROMPTS = {
    "tiny": "The lighthouse keeper counted the ships",
    "a1": "A short note about the northern cliffs and",
    "a2": "Seven gulls sat on the harbour wall while",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("lora-models")
    base = models / "tiny"
    shutil.copytree(model_dir("qwen2", "tiny"), base)
    build_adapter(models / "a1", base, seed=11)
    build_adapter(models / "a2", base, seed=12, rank=8)
    home = tmp_path_factory.mktemp("lora-home")
    # Four requests fill every slot: the batch wait admits them together (then set to 0).
    server = ServerProcess(
        ["--model-dir", str(models), "--max-concurrent-requests", "4", "--max-batch-wait-ms", "60000"], home
    )
    yield server
    server.stop()


def _client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=180)


def _complete(url, model, salt):
    with _client(url) as client:
        r = client.completions.create(
            model=model, prompt=PROMPTS[model], temperature=0, max_tokens=8, extra_body={"cache_salt": salt}
        )
    return r.choices[0].text, r.usage.prompt_tokens_details.cached_tokens


def test_adapters_are_listed_with_their_base(server):
    with _client(server.url) as client:
        listed = {m.id: m for m in client.models.list().data}
    assert listed["a1"].base == "tiny" and listed["a2"].base == "tiny"
    assert listed["tiny"].base is None


def test_two_adapters_and_the_base_in_one_batch_equal_each_alone(server):
    names = ["tiny", "a1", "a2", "a1"]
    together = [None] * len(names)

    def run(i):
        together[i] = _complete(server.url, names[i], "together")[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    r = httpx.patch(f"{server.url}/v1/models/tiny/settings", json={"max_batch_wait_ms": 0}, timeout=30)
    assert r.status_code == 200, r.text
    alone = {name: _complete(server.url, name, "alone")[0] for name in set(names)}
    assert together == [alone[name] for name in names]
    assert len(set(alone.values())) == 3, "each adapter (and the base) answers its own way"


def test_a_cache_hit_never_crosses_adapters(server):
    httpx.patch(f"{server.url}/v1/models/tiny/settings", json={"max_batch_wait_ms": 0}, timeout=30)
    salt = "crossing"
    with _client(server.url) as client:

        def cached(model):
            r = client.completions.create(
                model=model,
                prompt=PROMPTS["tiny"],
                temperature=0,
                max_tokens=4,
                extra_body={"cache_salt": salt},
            )
            return r.usage.prompt_tokens_details.cached_tokens

        assert cached("tiny") == 0
        assert cached("a1") == 0, "an adapter reused its base's KV"
        assert cached("a1") > 0, "an adapter reuses its own KV"
        assert cached("a2") == 0, "an adapter reused another adapter's KV"
        assert cached("tiny") > 0


def test_omlx_models_says_an_adapters_base(server, tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMLX_HOME=str(tmp_path), OMLX_DATABASE=str(tmp_path / "omlx.sqlite3"))
    env.pop("OMLX_API_KEY", None)
    out = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "models", "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("a1 "))
    assert line.endswith("LoRA adapter over tiny")
