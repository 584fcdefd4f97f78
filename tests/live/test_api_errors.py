"""Bad input on every OpenAI route of a live `omlx serve`: always a 4xx in OpenAI's envelope with a
message, and the server keeps serving. Also the limits: 413 (body size), 429 (queue), 503."""

import asyncio
import json
import shutil
import time

import httpx
import openai
import pytest

from tests.support.server import ServerProcess

M = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat(**fields):
    return json.dumps({"model": "tiny", "messages": M, **fields}).encode()


def completion(**fields):
    return json.dumps({"model": "tiny", "prompt": "hi", **fields}).encode()


RAW = [  # bodies that are not a JSON object: the same on both routes
    b"",
    b"not json",
    b'{"model": ',
    b"[1, 2]",
    b'[{"model": "tiny"}]',
    b'"a string"',
    b"null",
    b"123",
    b"\xff\xfe\x00\x01",
    b'{"model": "tiny", "prompt": "\xff\xfe"}',
]

BAD = [
    (CHAT, json.dumps({"messages": M}).encode()),
    (CHAT, json.dumps({"model": "tiny"}).encode()),
    (CHAT, json.dumps({"model": 5, "messages": M}).encode()),
    (CHAT, json.dumps({"model": ["tiny"], "messages": M}).encode()),
    (CHAT, json.dumps({"model": "nope", "messages": M}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": []}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": "hello"}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": {"role": "user"}}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [5]}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [{"content": "x"}]}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [{"role": 7, "content": "x"}]}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [{"role": "user", "content": 5}]}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [{"role": "user", "content": {"a": 1}}]}).encode()),
    (CHAT, json.dumps({"model": "tiny", "messages": [{"role": "user", "content": [5]}]}).encode()),
    (
        CHAT,
        json.dumps(
            {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
        ).encode(),
    ),
    (CHAT, chat(max_tokens=0)),
    (CHAT, chat(max_tokens=-5)),
    (CHAT, chat(max_tokens="many")),
    (CHAT, chat(max_tokens=1.5)),
    (CHAT, chat(max_completion_tokens=-1)),
    (CHAT, chat(temperature=-1)),
    (CHAT, chat(temperature="hot")),
    (CHAT, chat(temperature=[1])),
    (CHAT, chat(top_p=0)),
    (CHAT, chat(top_p=2)),
    (CHAT, chat(top_k=-2)),
    (CHAT, chat(min_p=-1)),
    (CHAT, chat(presence_penalty=1e9)),
    (CHAT, chat(frequency_penalty="x")),
    (CHAT, chat(repetition_penalty=0)),
    (CHAT, chat(n=0)),
    (CHAT, chat(n=1000)),
    (CHAT, chat(n=1.5)),
    (CHAT, chat(n="two")),
    (CHAT, chat(stop=[1, 2])),
    (CHAT, chat(stop=["a"] * 10)),
    (CHAT, chat(stop={"a": 1})),
    (CHAT, chat(seed="x")),
    (CHAT, chat(seed=1.5)),
    (CHAT, chat(stream=[True])),
    (CHAT, chat(stream_options={"include_usage": "maybe"})),
    (CHAT, chat(logprobs=True, top_logprobs=100)),
    (CHAT, chat(top_logprobs=2)),
    (CHAT, chat(ignore_eos={"x": 1})),
    (CHAT, chat(messages=[{"role": "user", "content": "x" * 20000}])),  # over the context
    (COMPLETIONS, json.dumps({"model": "tiny"}).encode()),
    (COMPLETIONS, json.dumps({"prompt": "x"}).encode()),
    (COMPLETIONS, json.dumps({"model": "nope", "prompt": "x"}).encode()),
    (COMPLETIONS, completion(prompt=5)),
    (COMPLETIONS, completion(prompt="")),
    (COMPLETIONS, completion(prompt=[])),
    (COMPLETIONS, completion(prompt=[[]])),
    (COMPLETIONS, completion(prompt=[-1])),
    (COMPLETIONS, completion(prompt=[10**9])),
    (COMPLETIONS, completion(prompt=[10**30])),
    (COMPLETIONS, completion(prompt=[1.5])),
    (COMPLETIONS, completion(prompt=["a", [1]])),
    (COMPLETIONS, completion(prompt={"text": "x"})),
    (COMPLETIONS, completion(prompt=["x"] * 300, n=16)),
    (COMPLETIONS, completion(prompt=list(range(3, 1003)) * 5)),  # 5000 tokens, context 4096
    (COMPLETIONS, completion(logprobs=100)),
    (COMPLETIONS, completion(logprobs=-1)),
    (COMPLETIONS, completion(echo={"on": True})),  # echo itself is served (docs/api.md)
    (COMPLETIONS, completion(max_tokens=0)),
    (COMPLETIONS, completion(max_tokens="ten")),
    (COMPLETIONS, completion(temperature=-0.5)),
    (COMPLETIONS, completion(n=17)),
    (COMPLETIONS, completion(stop="x", stream="often")),
] + [(route, raw) for raw in RAW for route in (CHAT, COMPLETIONS)]


@pytest.mark.parametrize("route, body", BAD, ids=[f"{r.split('/')[-1]}-{i}" for i, (r, _) in enumerate(BAD)])
def test_bad_requests_are_4xx_and_the_server_keeps_serving(omlx_server, route, body):
    for stream in (False, True):
        sent = body
        if stream and body.startswith(b"{") and b'"stream"' not in body:
            sent = body[:-1] + b', "stream": true}'
        response = httpx.post(
            omlx_server.url + route, content=sent, timeout=120, headers={"content-type": "application/json"}
        )
        assert 400 <= response.status_code < 500, (sent[:200], response.status_code, response.text[:300])
        assert response.headers["content-type"].startswith("application/json")
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert error["type"] in ("invalid_request_error", "authentication_error")
    good = httpx.post(
        omlx_server.url + COMPLETIONS,
        timeout=120,
        json={"model": "tiny", "prompt": "still there?", "max_tokens": 2},
    )
    assert good.status_code == 200
    assert good.json()["usage"]["completion_tokens"] == 2


def test_context_length_errors(omlx_server):
    long_text = "cache " * 6000
    for route, body in (
        (CHAT, {"messages": [{"role": "user", "content": long_text}]}),
        (COMPLETIONS, {"prompt": long_text}),
    ):
        for stream in (False, True):
            response = httpx.post(
                omlx_server.url + route, timeout=120, json={"model": "tiny", "stream": stream, **body}
            )
            assert response.status_code == 400
            assert "maximum context length is 4096 tokens" in response.json()["error"]["message"]


def test_max_tokens_beyond_the_context_stops_at_the_context(omlx_server):
    """prompt + max_tokens over the context is not an error: generation ends at the context's end
    with finish_reason "length" (clients such as coding agents send large max_tokens)."""
    prompt = list(range(3, 1003)) * 4 + list(range(3, 88))  # 4085 tokens of 4096
    response = httpx.post(
        omlx_server.url + COMPLETIONS,
        timeout=120,
        json={"model": "tiny", "prompt": prompt, "max_tokens": 100, "ignore_eos": True},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] == 4096


def test_unknown_routes_and_methods_use_the_envelope(omlx_server):
    for method, path, status in (
        ("GET", "/v1/nope", 404),
        ("POST", "/v1/chat/nope", 404),
        ("POST", "/v1/models", 405),
        ("GET", CHAT, 405),
    ):
        response = httpx.request(method, omlx_server.url + path, timeout=60)
        assert response.status_code == status
        assert response.json()["error"]["message"]


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("limited-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    server = ServerProcess(
        [
            "--model-dir",
            str(models),
            "--max-request-size",
            "64KiB",
            "--max-concurrent-requests",
            "1",
            "--max-queued-requests",
            "1",
        ],
        tmp_path_factory.mktemp("limited-home"),
    )
    yield server
    server.stop()


def test_oversized_bodies_get_413(limited_server):
    big = json.dumps({"model": "tiny", "prompt": "a" * 70000}).encode()
    response = httpx.post(
        limited_server.url + COMPLETIONS,
        content=big,
        timeout=60,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert "65536 bytes" in response.json()["error"]["message"]

    def chunked():  # no Content-Length: counted as it arrives
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    response = httpx.post(
        limited_server.url + CHAT, content=chunked(), timeout=60, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    # Just under the limit (an unknown field is ignored): served.
    ok = httpx.post(
        limited_server.url + COMPLETIONS,
        timeout=120,
        json={"model": "tiny", "prompt": "hi", "max_tokens": 1, "padding": "x" * 60000},
    )
    assert ok.status_code == 200


def test_over_capacity_gets_429_with_retry_after(limited_server):
    """One running + one queued choice fill the model (a request with n=2: 2 x 3000 tokens, one
    after the other, far longer than the few requests below); a third choice is refused before
    queuing."""
    body = {
        "model": "tiny",
        "prompt": "Go on",
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
        "n": 2,
    }
    url = limited_server.url + COMPLETIONS
    with httpx.stream("POST", url, json=body, timeout=120) as running:
        assert running.status_code == 200
        lines = running.iter_lines()  # kept: closing this iterator would close the stream
        assert next(lines).startswith("data: ")
        refused = httpx.post(url, json={"model": "tiny", "prompt": "hi", "max_tokens": 2}, timeout=60)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
        with openai.OpenAI(base_url=limited_server.url + "/v1", api_key="x", max_retries=0) as sdk:
            with pytest.raises(openai.RateLimitError):
                sdk.completions.create(model="tiny", prompt="hi", max_tokens=2)
    # The stream was closed: its slots come back once the server saw the disconnect.
    for _ in range(600):
        again = httpx.post(url, json={"model": "tiny", "prompt": "hi", "max_tokens": 2}, timeout=120)
        if again.status_code != 429:
            break
        time.sleep(0.1)
    assert again.status_code == 200


def test_503_while_shutting_down(tmp_path_factory, model_dir):
    """In process: once the shutdown has begun, requests get a 503 in the envelope."""
    from django.test import AsyncClient, override_settings

    from inference import lifecycle
    from inference.pool import close_pool

    models = tmp_path_factory.mktemp("shutdown-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    with override_settings(OMLX_MODEL_DIR=models, OMLX_API_HANDOFF="direct", OMLX_API_KEY=None):
        lifecycle.start_shutdown()
        try:

            async def go():
                return await AsyncClient().post(
                    COMPLETIONS,
                    json.dumps({"model": "tiny", "prompt": "hi"}),
                    content_type="application/json",
                )

            response = asyncio.run(go())
        finally:
            lifecycle._shutting_down.clear()
        close_pool()
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "server_shutting_down"


def test_django_body_limit_is_a_413_too(tmp_path_factory, model_dir):
    """Without the ASGI middleware (Django's own limit, DATA_UPLOAD_MAX_MEMORY_SIZE): 413, not 400."""
    from django.test import AsyncClient, override_settings

    from inference.pool import close_pool

    models = tmp_path_factory.mktemp("django-limit-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    with override_settings(
        OMLX_MODEL_DIR=models, OMLX_API_HANDOFF="direct", OMLX_API_KEY=None, DATA_UPLOAD_MAX_MEMORY_SIZE=2048
    ):

        async def go():
            return await AsyncClient().post(
                COMPLETIONS,
                json.dumps({"model": "tiny", "prompt": "a" * 5000}),
                content_type="application/json",
            )

        response = asyncio.run(go())
        close_pool()
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert "2048 bytes" in response.json()["error"]["message"]
