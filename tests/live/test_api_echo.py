"""``echo`` on /v1/completions against the shared live `omlx serve` (the tiny qwen2 as "tiny"): the
prompt tokens' logprobs (the first null, as OpenAI's legacy API) equal the in-process
perplexity path's (inference/bench/perplexity.py) on the same model, across scoring windows;
``max_tokens`` 0 scores without generating; echo with generation, ``n`` > 1 and streaming
starts every choice with its prompt. (httpx, not the SDK: its types have no null logprob.)"""

import json

import httpx
import numpy as np
import pytest

from inference.bench import perplexity
from inference.engine.model_loader import load_model


@pytest.fixture(scope="module")
def completions(omlx_server):
    def post(**body):
        response = httpx.post(
            omlx_server.url + "/v1/completions", json={"model": "tiny", **body}, timeout=120
        )
        assert response.status_code == 200, response.text
        return response.json()

    return post


def test_echo_logprobs_equal_the_in_process_perplexity_path(completions, model_dir):
    text = perplexity.text()
    reply = completions(prompt=text, echo=True, logprobs=2, max_tokens=0, temperature=0)
    choice = reply["choices"][0]
    loaded = load_model(model_dir("qwen2", "tiny"), dtype="float32")
    ids = list(loaded.tokenizer.encode(text))
    want = perplexity.token_logprobs(loaded.model, ids)
    assert len(ids) > 2 * perplexity.WINDOW  # windows of the server's scoring are crossed
    assert choice["text"] == text and choice["finish_reason"] == "length"
    assert reply["usage"]["prompt_tokens"] == len(ids) and reply["usage"]["completion_tokens"] == 0
    logprobs = choice["logprobs"]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert len(logprobs["tokens"]) == len(ids) and logprobs["text_offset"][0] == 0
    np.testing.assert_allclose(logprobs["token_logprobs"][1:], want, atol=1e-4)
    for value, top in zip(logprobs["token_logprobs"][1:], logprobs["top_logprobs"][1:]):
        assert len(top) == 2 and max(top.values()) >= value - 1e-5


def test_echo_with_generation_n_and_stream(completions, omlx_server):
    prompt = "Once upon a time"
    body = dict(prompt=prompt, temperature=0, max_tokens=4)
    plain = completions(**body)["choices"][0]["text"]
    reply = completions(**body, echo=True, logprobs=1, n=2)
    assert [c["text"] for c in reply["choices"]] == [prompt + plain] * 2
    prompt_tokens = reply["usage"]["prompt_tokens"]  # one prompt, counted once
    for choice in reply["choices"]:
        assert len(choice["logprobs"]["tokens"]) == prompt_tokens + 4
        assert choice["logprobs"]["token_logprobs"][0] is None
    chunks = []
    with httpx.stream(
        "POST",
        omlx_server.url + "/v1/completions",
        json={"model": "tiny", **body, "echo": True, "stream": True},
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    assert chunks[0]["choices"][0]["text"] == prompt
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == prompt + plain
