"""`omlx serve --kv-bits 8` live: a chat request is answered, the same prefix again is served
from the (quantized) block cache, speculation runs on the quantized batch with the same greedy
output, and GET /v1/cache/status names the KV format."""

import shutil

import httpx
import openai
import pytest

from tests.support.server import ServerProcess

QUESTION = "Describe the blue lighthouse on the northern cliffs, its keeper and the ships it guides."


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("kvq-models")
    # head dim 64 (the tiny preset's 16 is below any quantization group)
    tiny = model_dir("qwen2", "tiny", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    shutil.copytree(tiny, models / "tiny")
    home = tmp_path_factory.mktemp("kvq-home")
    server = ServerProcess(["--model-dir", str(models), "--kv-bits", "8", "--kv-group-size", "32"], home)
    yield server
    server.stop()


def chat(url, **extra):
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        r = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": QUESTION}],
            temperature=0,
            max_tokens=12,
            extra_body=extra,
        )
    return r.choices[0].message.content, r.usage.prompt_tokens_details.cached_tokens


def test_a_quantized_kv_server_answers_and_reuses_its_prefix(server):
    first, cached = chat(server.url)
    assert first and cached == 0
    again, cached = chat(server.url, speculative=True)
    assert again == first and cached > 0
    status = httpx.get(server.url + "/v1/cache/status", timeout=30).json()
    (row,) = [r for r in status["data"] if r["id"] == "tiny"]
    assert row["kv_format"] == "q8g32"
    assert row["hot"]["blocks"] > 0 and row["stats"]["hot_hit_tokens"] >= cached
