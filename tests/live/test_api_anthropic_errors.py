"""The Anthropic Messages API's errors on a live `omlx serve`: each bad request is a 4xx in
Anthropic's error envelope (`{"type": "error", "error": {"type", "message"}}`), and the SDK raises
the class that status maps to."""

import anthropic
import pytest
from django.conf import settings

from tests.support.anthropic_clients import WEATHER, client, envelope, http  # noqa: F401  (fixtures)

USER = [{"role": "user", "content": "Tell me about caching."}]


# -- errors ------------------------------------------------------------------------------------


def test_malformed_json_is_a_400(http):
    response = http.post(
        "/v1/messages",
        content=b'{"model": "tiny", "max_tokens": ',
        headers={"content-type": "application/json"},
    )
    assert "JSON" in envelope(response, 400, "invalid_request_error")
    response = http.post(
        "/v1/messages/count_tokens", content=b"[1, 2", headers={"content-type": "application/json"}
    )
    envelope(response, 400, "invalid_request_error")


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"model": "tiny", "messages": USER}, "max_tokens"),
        ({"model": "tiny", "max_tokens": "many", "messages": USER}, "max_tokens"),
        ({"model": "tiny", "max_tokens": 0, "messages": USER}, "max_tokens"),
        ({"model": "tiny", "max_tokens": 4, "messages": []}, "messages"),
        ({"model": "tiny", "max_tokens": 4, "messages": "hi"}, "messages"),
        ({"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": 5}]}, "content"),
        ({"model": "tiny", "max_tokens": 4, "messages": [{"role": "robot", "content": "hi"}]}, "role"),
        ({"model": 7, "max_tokens": 4, "messages": USER}, "model"),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "temperature": -1}, "temperature"),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "stop_sequences": [""]}, "stop_sequences"),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "stop_sequences": "END"}, "stop_sequences"),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "stream": "sometimes"}, "stream"),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "system": 12}, "system"),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "tools": [{"description": "no name"}]}, "name"),
        (
            {
                "model": "tiny",
                "max_tokens": 4,
                "messages": USER,
                "tools": [WEATHER],
                "tool_choice": {"type": "tool", "name": "other"},
            },
            "tool_choice",
        ),
        ({"model": "tiny", "max_tokens": 4, "messages": USER, "thinking": {"type": "sometimes"}}, "thinking"),
        (
            {
                "model": "tiny",
                "max_tokens": 4,
                "messages": USER,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "tools": [WEATHER],
                "tool_choice": {"type": "any"},
            },
            "thinking",
        ),
        (
            {
                "model": "tiny",
                "max_tokens": 4,
                "messages": USER,
                "output_config": {"format": {"type": "xml"}},
            },
            "output_config",
        ),
        (
            {
                "model": "tiny",
                "max_tokens": 4,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBORw0KGgo=",
                                },
                            }
                        ],
                    }
                ],
            },
            "image",
        ),
    ],
)
def test_bad_requests_are_400_in_the_envelope(http, body, fragment):
    for stream in (False, True):
        response = http.post("/v1/messages", json=dict(body, stream=body.get("stream", stream)))
        assert fragment in envelope(response, 400, "invalid_request_error")


def test_sdk_raises_the_right_classes(client):
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(model="no-such-model", max_tokens=4, messages=USER)
    assert raised.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=USER)
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model="tiny", max_tokens=-3, messages=USER)
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        with client.messages.stream(
            model="tiny",
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "url", "url": "http://example.invalid/x.png"}}
                    ],
                }
            ],
        ) as stream:
            stream.get_final_message()


def test_too_long_prompt_and_too_large_body(client, http):
    long_text = " ".join(f"w{i}" for i in range(6000))  # more tokens than the tiny model's 4096 context
    for stream in (False, True):
        response = http.post(
            "/v1/messages",
            json={
                "model": "tiny",
                "max_tokens": 4,
                "stream": stream,
                "messages": [{"role": "user", "content": long_text}],
            },
        )
        assert "context" in envelope(response, 400, "invalid_request_error")
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:
        pytest.skip("no request body limit configured")
    response = http.post(
        "/v1/messages",
        json={"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "x" * (limit + 1)}]},
    )
    envelope(response, 413, "request_too_large")
    with pytest.raises(anthropic.RequestTooLargeError):
        client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": "x" * (limit + 1)}])


@pytest.mark.parametrize("raw", [b"[]", b"null", b'"text"', b"12"])
def test_non_object_bodies_are_400(http, raw):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = http.post(path, content=raw, headers={"content-type": "application/json"})
        assert "JSON object" in envelope(response, 400, "invalid_request_error")
