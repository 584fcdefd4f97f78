"""The end-to-end path: a real `omlx serve` (Daphne, the Huey consumer in the process, the
in-memory channel layer) driven by the official OpenAI SDK, with strict response validation."""

import signal

import httpx
import openai
import pytest

from tests.support.sdk_clients import openai_client
from tests.support.server import ServerProcess
from tests.support.sse_client import leave_endless_stream

CHAT = [{"role": "user", "content": "Tell me about caching."}]


@pytest.fixture(scope="module")
def client(omlx_server):
    with openai_client(omlx_server.url) as c:
        yield c


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert models.data[0].object == "model"


def test_chat_completion_and_stream_agree(client):
    reply = client.chat.completions.create(model="tiny", messages=CHAT, temperature=0, max_tokens=12)
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason == "length"
    assert reply.usage.completion_tokens == 12
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 12

    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=CHAT, temperature=0, max_completion_tokens=12, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk


def test_stream_include_usage_and_cached_tokens(client):
    messages = [{"role": "user", "content": "A prompt that is sent twice, the second time from the cache."}]
    first = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=4)
    cached_before = first.usage.prompt_tokens_details.cached_tokens  # the template's head, maybe
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=messages,
            temperature=0,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage.prompt_tokens == first.usage.prompt_tokens
    assert usage_chunk.usage.completion_tokens == 4
    assert cached_before < usage_chunk.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == first.choices[0].message.content


def test_n_choices_and_seed(client):
    reply = client.chat.completions.create(
        model="tiny", messages=CHAT, n=2, max_tokens=6, seed=7, temperature=1.0
    )
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.usage.completion_tokens == 12
    again = client.chat.completions.create(
        model="tiny", messages=CHAT, n=2, max_tokens=6, seed=7, temperature=1.0
    )
    assert [c.message.content for c in again.choices] == [c.message.content for c in reply.choices]

    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=CHAT, n=2, max_tokens=6, seed=7, temperature=1.0, stream=True
        )
    )
    for index in (0, 1):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices[0].index == index)
        assert text == reply.choices[index].message.content


def test_stop_string(client):
    full = client.completions.create(model="tiny", prompt="The cache", temperature=0, max_tokens=16)
    text = full.choices[0].text
    stop = text[3:6]
    assert stop.strip()
    cut = client.completions.create(
        model="tiny", prompt="The cache", temperature=0, max_tokens=16, stop=[stop]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]


def test_completions(client):
    reply = client.completions.create(
        model="tiny", prompt="Once upon a time", temperature=0, max_tokens=8, logprobs=2
    )
    choice = reply.choices[0]
    assert reply.object == "text_completion"
    assert choice.finish_reason == "length"
    assert "".join(choice.logprobs.tokens) == choice.text
    assert all(len(top) <= 3 for top in choice.logprobs.top_logprobs)
    # The SDK types a text-completion chunk as a Completion, whose finish_reason may not be null
    # (OpenAI's own chunks carry null too), so chunks are checked without strict validation.
    lenient = client.with_options()
    lenient._strict_response_validation = False
    stream = list(
        lenient.completions.create(
            model="tiny", prompt="Once upon a time", temperature=0, max_tokens=8, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in stream) == choice.text

    ids = client.completions.create(model="tiny", prompt=[[5, 6, 7, 8]], temperature=0, max_tokens=3)
    assert ids.usage.prompt_tokens == 4


def test_chat_logprobs(client):
    reply = client.chat.completions.create(
        model="tiny", messages=CHAT, temperature=0, max_tokens=5, logprobs=True, top_logprobs=2
    )
    content = reply.choices[0].logprobs.content
    assert len(content) == 5
    assert all(len(entry.top_logprobs) == 2 for entry in content)


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "tiny", "messages": CHAT, "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "tiny", "messages": CHAT, "max_tokens": "many"}, 400, "max_tokens"),
        ({"model": "tiny", "messages": "hello"}, 400, "messages"),
        ({"model": "tiny", "messages": CHAT, "temperature": -1}, 400, "temperature"),
        ({"model": "nope", "messages": CHAT}, 404, "model"),
        ({"model": "tiny"}, 400, "messages"),
    ],
)
def test_bad_requests_get_an_error_envelope(omlx_server, body, status, param):
    response = httpx.post(omlx_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["message"] and error["type"]
    assert error["param"] == param


def test_malformed_json_and_too_long_prompt(omlx_server):
    response = httpx.post(
        omlx_server.url + "/v1/chat/completions",
        content=b"{not json",
        timeout=60,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]
    long_prompt = list(range(3, 1003)) * 5  # 5000 tokens; the tiny model's context is 4096
    for stream in (False, True):
        response = httpx.post(
            omlx_server.url + "/v1/completions",
            timeout=60,
            json={"model": "tiny", "prompt": long_prompt, "max_tokens": 4, "stream": stream},
        )
        assert response.status_code == 400
        assert "context" in response.json()["error"]["message"]


def test_client_disconnect_aborts_the_request(omlx_server):
    request_id = leave_endless_stream(omlx_server.url)
    assert omlx_server.wait_for_output(f"{request_id}-0 ended: abort")


def test_demo_model_api_key_and_clean_shutdown(tmp_path):
    """No model folder: the demo model. --api-key: the SDK's Bearer key or x-api-key."""
    server = ServerProcess(["--model-dir", str(tmp_path / "empty"), "--api-key", "sekrit"], tmp_path / "home")
    try:
        denied = httpx.get(server.url + "/v1/models", timeout=60)
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"
        with openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0) as wrong:
            with pytest.raises(openai.AuthenticationError):
                wrong.models.list()
        with openai.OpenAI(
            base_url=server.url + "/v1", api_key="sekrit", max_retries=0, _strict_response_validation=True
        ) as sdk:
            assert [m.id for m in sdk.models.list().data] == ["omlx-demo"]
            reply = sdk.completions.create(model="omlx-demo", prompt="hi", max_tokens=2)
            assert reply.usage.completion_tokens <= 2
        models = httpx.get(server.url + "/v1/models", headers={"x-api-key": "sekrit"}, timeout=60)
        assert models.status_code == 200
    finally:
        assert server.stop(signal.SIGINT) == 0
    assert "omlx stopped\n" in server.output


def test_concurrent_streams(client):
    """Several streams at once through the queue and the channel layer, each its own tokens."""
    from concurrent.futures import ThreadPoolExecutor

    prompts = [f"Request number {i} says" for i in range(6)]
    alone = [
        client.completions.create(model="tiny", prompt=p, temperature=0, max_tokens=10).choices[0].text
        for p in prompts
    ]

    def stream(prompt):
        lenient = client.with_options()
        lenient._strict_response_validation = False  # see test_completions
        chunks = lenient.completions.create(
            model="tiny", prompt=prompt, temperature=0, max_tokens=10, stream=True
        )
        return "".join(c.choices[0].text for c in chunks)

    with ThreadPoolExecutor(len(prompts)) as pool:
        assert list(pool.map(stream, prompts)) == alone
