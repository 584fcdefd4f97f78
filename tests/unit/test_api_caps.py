"""The caps of inference/api/common/caps.py, in process: one item beyond each cap is a 400 in the
API's own envelope that names the field and the cap; requests at the caps are served."""

import shutil

import pytest
from django.test import override_settings

from inference.api.common import caps
from inference.pool import close_pool
from tests.unit.test_api_inprocess import request

CHAT_PATH, COMPLETIONS, RESPONSES, MESSAGES, COUNT = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
)
HI = [{"role": "user", "content": "hi"}]
BASE = {
    CHAT_PATH: {"model": "tiny", "messages": HI, "max_tokens": 2},
    COMPLETIONS: {"model": "tiny", "prompt": "hi", "max_tokens": 2},
    RESPONSES: {"model": "tiny", "input": "hi", "max_output_tokens": 2, "store": False},
    MESSAGES: {"model": "tiny", "messages": HI, "max_tokens": 2},
    COUNT: {"model": "tiny", "messages": HI},
}
LONG_STOP = "x" * (caps.MAX_STOP_CHARS + 1)


def tool(i, **extra):
    return {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object"}, **extra}}


def anthropic_tool(i):
    return {"name": f"f{i}", "input_schema": {"type": "object"}}


def parts(count):
    return [{"type": "text", "text": "a"}] * count


def big_schema(size):
    return {"type": "object", "description": "d" * size}


OVER = {  # name -> (path, fields over the base body, a fragment of the message)
    "chat-stop-count": (CHAT_PATH, {"stop": ["a"] * (caps.MAX_STOP + 1)}, "at most 4 stop sequences"),
    "chat-stop-length": (CHAT_PATH, {"stop": ["a", LONG_STOP]}, "stop[1]: at most 1000 characters"),
    "completions-stop-string": (COMPLETIONS, {"stop": LONG_STOP}, "stop: at most 1000 characters"),
    "responses-stop-count": (RESPONSES, {"stop": ["a"] * 5}, "at most 4 stop sequences"),
    "messages-stop-count": (
        MESSAGES,
        {"stop_sequences": ["s"] * (caps.MAX_STOP_SEQUENCES + 1)},
        "stop_sequences: at most 16 stop sequences",
    ),
    "messages-stop-length": (MESSAGES, {"stop_sequences": [LONG_STOP]}, "at most 1000 characters"),
    "chat-messages": (CHAT_PATH, {"messages": HI * (caps.MAX_MESSAGES + 1)}, "at most 10000 messages"),
    "chat-content-parts": (
        CHAT_PATH,
        {"messages": [{"role": "user", "content": parts(caps.MAX_CONTENT_PARTS + 1)}]},
        "messages[0].content: at most 1000 content parts",
    ),
    "chat-tools": (CHAT_PATH, {"tools": [tool(i) for i in range(caps.MAX_TOOLS + 1)]}, "at most 512 tools"),
    "chat-tools-bytes": (
        CHAT_PATH,
        {"tools": [tool(0, description="d" * caps.MAX_TOOLS_BYTES)]},
        "bytes of JSON in the tools",
    ),
    "chat-response-format": (
        CHAT_PATH,
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": big_schema(2**18)},
            }
        },
        "response_format: at most 262144 bytes",
    ),
    "chat-template-kwargs": (
        CHAT_PATH,
        {"chat_template_kwargs": {"k": "v" * caps.MAX_TEMPLATE_KWARGS_BYTES}},
        "chat_template_kwargs: at most",
    ),
    "chat-n-times-max-tokens": (
        CHAT_PATH,
        {"n": 16, "max_tokens": caps.MAX_OUTPUT_TOKENS // 16 + 1},
        "x 16 choices",
    ),
    "completions-prompts-times-n": (
        COMPLETIONS,
        {"prompt": ["a", "b"], "n": 8, "max_tokens": caps.MAX_OUTPUT_TOKENS // 16 + 1},
        "at most 1048576 output tokens",
    ),
    "chat-model-name": (CHAT_PATH, {"model": "m" * (caps.MAX_MODEL_CHARS + 1)}, "model: at most 1000"),
    "messages-model-name": (MESSAGES, {"model": "m" * (caps.MAX_MODEL_CHARS + 1)}, "model: at most 1000"),
    "messages-messages": (MESSAGES, {"messages": HI * (caps.MAX_MESSAGES + 1)}, "at most 10000 messages"),
    "messages-blocks": (
        MESSAGES,
        {"messages": [{"role": "user", "content": parts(caps.MAX_CONTENT_PARTS + 1)}]},
        "messages[0].content: at most 1000",
    ),
    "messages-system-blocks": (
        MESSAGES,
        {"system": parts(caps.MAX_CONTENT_PARTS + 1)},
        "system: at most 1000",
    ),
    "messages-tools": (
        MESSAGES,
        {"tools": [anthropic_tool(i) for i in range(caps.MAX_TOOLS + 1)]},
        "at most 512 tools",
    ),
    "messages-output-schema": (
        MESSAGES,
        {"output_config": {"format": {"type": "json_schema", "schema": big_schema(2**18)}}},
        "output_config: at most",
    ),
    "messages-max-tokens": (MESSAGES, {"max_tokens": caps.MAX_OUTPUT_TOKENS + 1}, "output tokens"),
    "count-tokens-messages": (COUNT, {"messages": HI * (caps.MAX_MESSAGES + 1)}, "at most 10000 messages"),
    "responses-input-items": (
        RESPONSES,
        {"input": HI * (caps.MAX_MESSAGES + 1)},
        "at most 10000 input items",
    ),
    "responses-content-parts": (
        RESPONSES,
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}] * 1001}]},
        "input[0].content: at most 1000",
    ),
    "responses-tools": (
        RESPONSES,
        {"tools": [{"type": "function", "name": f"f{i}"} for i in range(caps.MAX_TOOLS + 1)]},
        "at most 512 tools",
    ),
    "responses-text-format": (
        RESPONSES,
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": big_schema(2**18)}}},
        "text.format: at most",
    ),
    "responses-metadata-pairs": (
        RESPONSES,
        {"metadata": {f"k{i}": "v" for i in range(17)}},
        "16 metadata pairs",
    ),
    "responses-metadata-key": (RESPONSES, {"metadata": {"k" * 65: "v"}}, "keys of at most 64"),
    "responses-metadata-value": (RESPONSES, {"metadata": {"k": "v" * 513}}, "metadata.k: at most 512"),
    "responses-user": (RESPONSES, {"user": "u" * (caps.MAX_USER_CHARS + 1)}, "user: at most 256"),
    "responses-max-output-tokens": (
        RESPONSES,
        {"max_output_tokens": caps.MAX_OUTPUT_TOKENS + 1},
        "max_output_tokens: at most",
    ),
}


@pytest.fixture(scope="module")
def api(tmp_path_factory, model_dir):
    """An in-process API over the tiny model, served as "tiny"."""
    models = tmp_path_factory.mktemp("caps-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    with override_settings(OMLX_MODEL_DIR=models, OMLX_API_HANDOFF="direct", OMLX_API_KEY=None):
        yield
    close_pool()


def message_of(path, response) -> str:
    if path.startswith("/v1/messages"):
        assert response["type"] == "error" and response["error"]["type"] == "invalid_request_error"
    return response["error"]["message"]


@pytest.mark.parametrize("name", list(OVER))
def test_one_beyond_each_cap_is_a_400_that_names_it(api, name):
    path, fields, fragment = OVER[name]
    status, response = request("POST", path, {**BASE[path], **fields})
    assert status == 400, (name, str(response)[:300])
    assert fragment in message_of(path, response), response


def test_the_5000_stop_sequences_of_the_issue_are_a_400(api):
    """issue 25: 5,000 stop sequences of 100 characters took 34 s of engine time."""
    status, response = request("POST", MESSAGES, {**BASE[MESSAGES], "stop_sequences": ["s" * 100] * 5000})
    assert status == 400
    assert message_of(MESSAGES, response) == "stop_sequences: at most 16 stop sequences per request, got 5000"


def test_requests_at_the_caps_are_served(api):
    at_cap = {
        CHAT_PATH: {"stop": ["\x07" * caps.MAX_STOP_CHARS] * caps.MAX_STOP},
        MESSAGES: {"stop_sequences": ["\x07" * caps.MAX_STOP_CHARS] * caps.MAX_STOP_SEQUENCES},
        RESPONSES: {
            "stop": ["\x07" * caps.MAX_STOP_CHARS] * caps.MAX_STOP,
            "metadata": {f"{i:0>64}": "v" * 512 for i in range(caps.MAX_METADATA_PAIRS)},
            "user": "u" * caps.MAX_USER_CHARS,
        },
    }
    for path, fields in at_cap.items():
        status, response = request("POST", path, {**BASE[path], **fields})
        assert status == 200, (path, str(response)[:300])


@pytest.mark.django_db(transaction=True)
def test_a_previous_response_chain_beyond_the_cap_is_a_400(api):
    from django.conf import settings

    from inference.models import StoredResponse

    cap = settings.OMLX_MAX_RESPONSE_CHAIN

    StoredResponse.objects.bulk_create(
        StoredResponse(
            id=f"resp_{i}",
            model="tiny",
            previous_response_id=f"resp_{i - 1}" if i else None,
            input_items=[],
            body={"output": []},
        )
        for i in range(cap + 1)
    )
    at_cap = {**BASE[RESPONSES], "previous_response_id": f"resp_{cap - 1}"}
    status, response = request("POST", RESPONSES, at_cap)
    assert status == 200, str(response)[:300]
    over = {**BASE[RESPONSES], "previous_response_id": f"resp_{cap}"}
    status, response = request("POST", RESPONSES, over)
    assert status == 400
    assert response["error"]["code"] == "response_chain_too_long"
    assert f"longer than {cap} responses" in response["error"]["message"]
