"""The REST API in process (Django's AsyncClient, the direct hand-off, the in-memory channel layer):
request validation, errors, the API key, SSE framing. The live server covers the Huey path."""

import asyncio
import json
import shutil

import pytest
from django.test import AsyncClient, override_settings

from inference.dispatch import relay
from inference.api.common import handoff
from inference.pool import close_pool

CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def served_models(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("inprocess-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    return models


@pytest.fixture
def api(served_models):
    """Settings for an in-process API over the tiny model; the registry is rebuilt from them."""
    close_pool()
    with override_settings(OMLX_MODEL_DIR=served_models, OMLX_API_HANDOFF="direct", OMLX_API_KEY=None):
        yield
    close_pool()


def request(method, path, body=None, raw=None, **headers):
    """(status, parsed JSON or the SSE text) of one in-process request."""

    async def go():
        client = AsyncClient()
        if method == "GET":
            response = await client.get(path, headers=headers)
        else:
            data = raw if raw is not None else json.dumps(body)
            response = await client.post(path, data, content_type="application/json", headers=headers)
        if response.streaming:
            text = "".join([part.decode() async for part in response.streaming_content])
            return response.status_code, text
        return response.status_code, json.loads(response.content)

    return asyncio.run(go())


def test_models_list(api):
    status, body = request("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in body["data"]] == ["tiny"]


def test_openapi_docs(api):
    async def go():
        client = AsyncClient()
        return (await client.get("/v1/docs")).status_code, json.loads(
            (await client.get("/v1/openapi.json")).content
        )

    status, schema = asyncio.run(go())
    assert status == 200
    assert set(schema["paths"]) == {
        "/v1/models",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/input_items",
        "/v1/models/status",
        "/v1/models/rescan",
        "/v1/models/{model_id}/load",
        "/v1/models/{model_id}/unload",
        "/v1/models/{model_id}/settings",
        "/v1/cache/status",
        "/v1/engine/step_trace",
        "/v1/embeddings",
        "/v1/rerank",
        "/v1/mcp/servers",
        "/v1/mcp/tools",
        "/v1/mcp/execute",
    }


def test_chat_completion_direct(api):
    status, body = request(
        "POST",
        "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": CHAT,
            "max_tokens": 5,
            "temperature": 0,
            "user": "someone",
            "unknown_field": 1,
        },
    )
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5
    assert "cached_tokens" in body["usage"]["prompt_tokens_details"]
    # OpenAI's fields only: the hot/cold split of the generation events stays inside omlx
    assert set(body["usage"]) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_tokens_details",
    }
    assert set(body["usage"]["prompt_tokens_details"]) == {"cached_tokens"}


def test_sse_framing(api):
    status, text = request(
        "POST",
        "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": CHAT,
            "max_tokens": 3,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert status == 200
    frames = [f for f in text.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "tiny", "messages": CHAT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "tiny", "messages": CHAT, "stop": [""]}, "stop"),
        ({"model": "tiny", "messages": CHAT, "n": 0}, "n"),
        ({"model": "tiny", "messages": CHAT, "top_p": 0}, "top_p"),
        ({"model": "tiny", "messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
        ({"model": "tiny", "messages": CHAT, "logprobs": True, "top_logprobs": 21}, "logprobs"),
        ({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ({"model": "tiny", "messages": []}, "messages"),
        ({"model": "tiny", "messages": CHAT, "seed": "x"}, "seed"),
        ({"model": "tiny", "messages": CHAT, "priority": 5000}, "priority"),
        ({"model": "tiny", "messages": CHAT, "priority": "high"}, "priority"),
        ({"model": "tiny", "messages": CHAT, "speculative": "yes"}, "speculative"),
        ({"model": "tiny", "messages": CHAT, "speculative": {"method": "ngram"}}, "speculative"),
        ({"model": "tiny", "messages": CHAT, "speculative": {"k": 2}}, "speculative"),
        (
            {"model": "tiny", "messages": CHAT, "speculative": {"num_draft_tokens": 99}},
            "speculative.num_draft_tokens",
        ),
    ],
)
def test_bad_chat_parameters_are_400(api, body, param):
    status, response = request("POST", "/v1/chat/completions", body)
    assert status == 400, response
    assert response["error"]["param"] == param
    assert response["error"]["type"] == "invalid_request_error"


def test_speculative_is_accepted(api):
    for value in (False, True, {"num_draft_tokens": 2}, {"method": "off"}, {"method": "suffix"}):
        body = {"model": "tiny", "messages": CHAT, "max_tokens": 3, "speculative": value}
        status, response = request("POST", "/v1/chat/completions", body)
        assert status == 200, response
        assert response["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/messages", {"model": "tiny", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 3, "store": False}),
    ],
    ids=["messages", "responses"],
)
def test_speculative_on_the_anthropic_and_responses_routes(api, path, body):
    """The same field as on the chat route: accepted, and a bad value is a 400 that names it
    (Anthropic's envelope has no param: the message starts with the field)."""
    status, response = request("POST", path, {**body, "speculative": {"num_draft_tokens": 2}})
    assert status == 200, response
    for value, name in (("yes", "speculative"), ({"num_draft_tokens": 99}, "speculative.num_draft_tokens")):
        status, response = request("POST", path, {**body, "speculative": value})
        assert status == 400, response
        error = response["error"]
        assert error["type"] == "invalid_request_error"
        assert error.get("param", name) == name and error["message"].startswith(name), error


def test_priority_is_accepted_on_every_route(api):
    """The field reaches the engine (a background priority still completes) on each API."""
    for path, body in (
        ("/v1/chat/completions", {"model": "tiny", "messages": CHAT, "max_tokens": 2, "priority": 7}),
        ("/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2, "priority": -3}),
        (
            "/v1/responses",
            {"model": "tiny", "input": "hi", "max_output_tokens": 2, "priority": 9, "store": False},
        ),
        (
            "/v1/messages",
            {
                "model": "tiny",
                "max_tokens": 2,
                "priority": 1,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
    ):
        status, response = request("POST", path, body)
        assert status == 200, (path, response)
    status, response = request(
        "POST",
        "/v1/messages",
        {"model": "tiny", "max_tokens": 2, "priority": 1.5, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert status == 400, response


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        ({"model": "tiny", "prompt": [], "max_tokens": 2}, 400, "empty"),
        ({"model": "tiny", "prompt": [99999], "max_tokens": 2}, 400, "vocabulary"),
        ({"model": "tiny", "prompt": "hi", "max_tokens": 0}, 400, "max_tokens 0 is only for echo"),
        ({"model": "nope", "prompt": "hi"}, 404, "does not exist"),
        ({"prompt": "hi"}, 400, "model"),
    ],
)
def test_bad_completion_requests(api, body, status, fragment):
    got, response = request("POST", "/v1/completions", body)
    assert got == status, response
    assert fragment in response["error"]["message"]


def test_malformed_json(api):
    status, body = request("POST", "/v1/completions", raw="{")
    assert status == 400
    assert body["error"]["message"] == "The request body is not valid JSON"


def test_api_key(api):
    with override_settings(OMLX_API_KEY="sekrit"):
        status, body = request("GET", "/v1/models")
        assert status == 401
        assert body["error"]["code"] == "invalid_api_key"
        assert request("GET", "/v1/models", authorization="Bearer wrong")[0] == 401
        assert request("GET", "/v1/models", authorization="Bearer sekrit")[0] == 200
        assert request("GET", "/v1/models", **{"x-api-key": "sekrit"})[0] == 200
        status, _ = request("POST", "/v1/completions", {"model": "tiny", "prompt": "hi"})
        assert status == 401


def test_keepalive_comments_while_waiting(api, monkeypatch):
    """Between events the stream sends SSE comments, every OMLX_SSE_KEEPALIVE_SECONDS."""

    async def slow_worker(job):
        async def later():
            relay.publish(job.request_id, {"kind": "accepted"})
            await asyncio.sleep(0.2)
            relay.publish(
                job.request_id,
                {
                    "kind": "delta",
                    "index": 0,
                    "text": "hi",
                    "token_ids": [1],
                    "logprobs": None,
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0},
                    "error": None,
                },
            )

        asyncio.get_running_loop().create_task(later())

    monkeypatch.setattr(handoff, "submit", slow_worker)
    monkeypatch.setattr(handoff, "abort", lambda job: None)
    with override_settings(OMLX_SSE_KEEPALIVE_SECONDS=0.01):
        status, text = request("POST", "/v1/completions", {"model": "tiny", "prompt": "x", "stream": True})
    assert status == 200
    assert ": keep-alive\n\n" in text
    assert text.endswith("data: [DONE]\n\n")
    assert '"text":"hi"' in text


def test_streamed_completion_logprobs_offsets(api):
    status, text = request(
        "POST",
        "/v1/completions",
        {"model": "tiny", "prompt": "hi", "max_tokens": 5, "temperature": 0, "logprobs": 1, "stream": True},
    )
    assert status == 200
    chunks = [json.loads(f[6:]) for f in text.split("\n\n") if f.startswith("data: {")]
    tokens, offsets = [], []
    for chunk in chunks:
        logprobs = chunk["choices"][0]["logprobs"]
        if logprobs:
            tokens += logprobs["tokens"]
            offsets += logprobs["text_offset"]
    assert len(tokens) == 5
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(5)]


def test_each_prompt_is_validated_once(api, monkeypatch):
    """The worker validates each prompt once (``Engine.validate_prompt``, against the one context
    limit) and submits its choices as checked: n choices do not validate it again."""
    from inference.engine.engine import Engine

    calls = []
    validate = Engine.validate_prompt

    def counted(self, prompt, *args, **kwargs):
        calls.append(len(prompt))
        return validate(self, prompt, *args, **kwargs)

    monkeypatch.setattr(Engine, "validate_prompt", counted)
    status, body = request(
        "POST",
        "/v1/chat/completions",
        {"model": "tiny", "messages": CHAT, "max_tokens": 2, "n": 2, "temperature": 0},
    )
    assert status == 200, body
    assert len(body["choices"]) == 2 and len(calls) == 1, calls
    calls.clear()
    status, body = request(
        "POST", "/v1/completions", {"model": "tiny", "prompt": [[5, 6, 7], [8, 9]], "max_tokens": 2, "n": 2}
    )
    assert status == 200, body
    assert len(body["choices"]) == 4 and sorted(calls) == [2, 3], calls
