"""The fixtures and helpers of the Anthropic API's live tests (WEATHER: a tool; envelope: the
error envelope checked): the official SDK (strict response validation)
and httpx, both on the session's shared `omlx serve` (tests/conftest.py's ``omlx_server``)."""

import httpx
import pytest

from tests.support.sdk_clients import anthropic_client


@pytest.fixture(scope="module")
def client(omlx_server):
    with anthropic_client(omlx_server.url) as c:
        yield c


@pytest.fixture(scope="module")
def http(omlx_server):
    with httpx.Client(base_url=omlx_server.url, timeout=120) as c:
        yield c


# Bounded strings: a random-weight model under a grammar never closes an unbounded one.
WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def envelope(response, status, error_type):
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == error_type
    assert body["error"]["message"]
    return body["error"]["message"]
