"""The Anthropic Messages API end to end: a live `omlx serve` driven by the official anthropic SDK
(strict response validation) and by httpx on the raw SSE stream."""

import json
import os
import re
import shutil

import anthropic
import httpx
import pytest

from tests.support.anthropic_clients import WEATHER, client, envelope, http  # noqa: F401  (fixtures)
from tests.support.sdk_clients import anthropic_client
from tests.support.server import ServerProcess

GREEDY = {"extra_body": {"temperature": 0}}  # this SDK has no temperature argument any more
USER = [{"role": "user", "content": "Tell me about caching."}]


def sse_events(response):
    """(event line, data) of each SSE frame; the event line must name the data's type."""
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert name == data["type"], (name, data)
            events.append(data)
            name = None
        else:
            assert line == "", line  # no SSE comments: keep-alives are ping events
    return events


def total_input(usage):
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_models_list(client):
    """The Anthropic SDK's models.list() reads the same route in Anthropic's format."""
    page = client.models.list()
    assert [m.id for m in page.data] == ["tiny"]
    assert page.data[0].type == "model" and page.first_id == "tiny" and not page.has_more


def test_message(client):
    message = client.messages.create(model="tiny", max_tokens=8, messages=USER, **GREEDY)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "tiny"
    assert [b.type for b in message.content] == ["text"] and message.content[0].text
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 8
    assert total_input(message.usage) > 0 and message.usage.cache_creation_input_tokens == 0


def test_stream_matches_message(client):
    message = client.messages.create(model="tiny", max_tokens=10, messages=USER, **GREEDY)
    with client.messages.stream(model="tiny", max_tokens=10, messages=USER, **GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == message.content[0].text == final.content[0].text
    assert final.id.startswith("msg_") and final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 10
    assert total_input(final.usage) == total_input(message.usage)


def test_raw_event_order(client, http):
    body = {"model": "tiny", "max_tokens": 6, "messages": USER, "temperature": 0, "stream": True}
    count = client.messages.count_tokens(model="tiny", messages=USER).input_tokens
    with http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    types = " ".join(e["type"] for e in events)
    assert re.fullmatch(
        r"message_start ping (content_block_start (content_block_delta |ping )*"
        r"content_block_stop )*message_delta message_stop",
        types,
    ), types
    start = events[0]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == count and start["usage"]["output_tokens"] == 0
    blocks = [e for e in events if e["type"] == "content_block_start"]
    assert [b["index"] for b in blocks] == list(range(len(blocks)))
    end = events[-2]
    assert end["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert end["usage"]["output_tokens"] == 6
    assert end["usage"]["input_tokens"] + end["usage"]["cache_read_input_tokens"] == count
    assert set(end["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }


def test_system_as_string_blocks_or_message(client):
    counts = [
        client.messages.count_tokens(model="tiny", messages=USER, system="Answer in one word.").input_tokens,
        client.messages.count_tokens(
            model="tiny",
            messages=USER,
            system=[{"type": "text", "text": "Answer in one word.", "cache_control": {"type": "ephemeral"}}],
        ).input_tokens,
        client.messages.count_tokens(
            model="tiny", messages=[{"role": "system", "content": "Answer in one word."}, *USER]
        ).input_tokens,
    ]
    assert counts[0] == counts[1] == counts[2]
    assert counts[0] > client.messages.count_tokens(model="tiny", messages=USER).input_tokens
    replies = [
        client.messages.create(model="tiny", max_tokens=6, **GREEDY, messages=USER, system=system)
        for system in ("Answer in one word.", [{"type": "text", "text": "Answer in one word."}])
    ]
    assert replies[0].content[0].text == replies[1].content[0].text


def test_repeated_prompt_reads_the_cache(client):
    messages = [
        {"role": "user", "content": "A prompt sent twice to the Anthropic route, then from the cache."}
    ]
    first = client.messages.create(model="tiny", max_tokens=4, messages=messages, **GREEDY)
    second = client.messages.create(model="tiny", max_tokens=4, messages=messages, **GREEDY)
    assert second.usage.cache_read_input_tokens > first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens > 0
    assert total_input(second.usage) == total_input(first.usage)
    assert second.usage.input_tokens < first.usage.input_tokens


def test_count_tokens_equals_the_request_usage(client):
    messages = [
        {"role": "user", "content": "Count me, then run me: the counts must agree."},
        {"role": "assistant", "content": "Agreed."},
        {"role": "user", "content": "Go on."},
    ]
    count = client.messages.count_tokens(model="tiny", messages=messages, system="You count.")
    message = client.messages.create(model="tiny", max_tokens=3, messages=messages, system="You count.")
    # Anthropic splits the prompt: input_tokens were computed, cache_read_input_tokens came from the cache.
    assert count.input_tokens == total_input(message.usage)
    assert count.input_tokens > 20


def test_stop_sequence(client):
    full = client.messages.create(model="tiny", max_tokens=16, messages=USER, **GREEDY).content[0].text
    stop = full[4:7]
    assert stop.strip(), full
    message = client.messages.create(
        model="tiny", max_tokens=16, messages=USER, **GREEDY, stop_sequences=["never-seen-stop", stop]
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    assert message.content[0].text == full[: full.index(stop)]
    with client.messages.stream(
        model="tiny", max_tokens=16, messages=USER, **GREEDY, stop_sequences=[stop]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == full[: full.index(stop)]
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


def test_claude_code_like_request(client):
    """Fields, blocks, headers and query parameters that real clients send are accepted."""
    with client.messages.stream(
        model="tiny",
        max_tokens=6,
        system=[
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                    {"type": "text", "text": "List the files.", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
        tools=[
            {
                "name": "Bash",
                "description": "Run a command",
                "cache_control": {"type": "ephemeral"},
                "input_schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                    "additionalProperties": False,
                    "$schema": "http://json-schema.org/draft-07/schema#",
                },
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        tool_choice={"type": "auto"},
        metadata={"user_id": "user_abc_account_def_session_123"},
        thinking={"type": "disabled"},
        extra_headers={
            "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
            "fine-grained-tool-streaming-2025-05-14",
            "x-app": "cli",
            "anthropic-dangerous-direct-browser-access": "true",
        },
        extra_query={"beta": "true"},
        extra_body={
            "service_tier": "auto",
            "container": None,
            "mcp_servers": [],
            "context_management": {"edits": []},
            "output_format": None,
            "some_future_field": {"x": 1},
            "temperature": 0,
            "top_k": 5,
            "top_p": 0.9,
        },
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("max_tokens", "end_turn", "tool_use")
    assert final.usage.output_tokens >= 1


def test_unknown_block_types_are_skipped(client):
    plain = [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    extra = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Hello"},
                {"type": "a_block_from_the_future", "data": {"x": 1}},
            ],
        }
    ]
    assert (
        client.messages.count_tokens(model="tiny", messages=extra).input_tokens
        == client.messages.count_tokens(model="tiny", messages=plain).input_tokens
    )
    message = client.messages.create(model="tiny", max_tokens=3, messages=extra)
    assert message.usage.output_tokens >= 1


def test_tool_and_thinking_history_is_accepted(client):
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "Sunny, 21C"}],
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    tools = [
        {
            "name": "get_weather",
            "description": "Weather of a city",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    message = client.messages.create(model="tiny", max_tokens=4, messages=messages, tools=tools)
    count = client.messages.count_tokens(model="tiny", messages=messages, tools=tools)
    assert count.input_tokens == total_input(message.usage)


def test_tool_choice_any_returns_tool_use(client):
    message = client.messages.create(
        model="tiny",
        max_tokens=200,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    tool_uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and tool_uses
    assert tool_uses[0].name == "get_weather" and tool_uses[0].id.startswith("toolu_")
    assert isinstance(tool_uses[0].input.get("city"), str)
    with client.messages.stream(
        model="tiny",
        max_tokens=200,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as stream:
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed[0].name == "get_weather"
    assert isinstance(streamed[0].input.get("city"), str)
    # The result goes back in the next turn.
    follow = client.messages.create(
        model="tiny",
        max_tokens=4,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in message.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_uses[0].id, "content": "Sunny"}],
            },
        ],
    )
    assert follow.usage.output_tokens >= 1


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory, model_dir):
    """A second server: an API key, keep-alive pings after 1 ms without an event, and a qwen3
    model (its template opens a <think> block when thinking is on)."""
    models = tmp_path_factory.mktemp("keyed-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    shutil.copytree(model_dir("qwen3", "tiny"), models / "qwen3")
    os.environ["OMLX_SSE_KEEPALIVE_SECONDS"] = "0.001"
    try:
        server = ServerProcess(
            ["--model-dir", str(models), "--api-key", "s3cret"], tmp_path_factory.mktemp("keyed-home")
        )
    finally:
        del os.environ["OMLX_SSE_KEEPALIVE_SECONDS"]
    yield server
    server.stop()


def test_api_key(keyed_server):
    url = keyed_server.url
    with anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0) as c:
        with pytest.raises(anthropic.AuthenticationError) as raised:
            c.messages.count_tokens(model="tiny", messages=USER)
        assert raised.value.body["error"]["type"] == "authentication_error"
    with anthropic.Anthropic(
        base_url=url, api_key="s3cret", max_retries=0, _strict_response_validation=True
    ) as c:
        assert c.messages.count_tokens(model="tiny", messages=USER).input_tokens > 0
        assert c.messages.create(model="tiny", max_tokens=2, messages=USER).usage.output_tokens >= 1
    with anthropic.Anthropic(base_url=url, auth_token="s3cret", max_retries=0) as c:  # Authorization: Bearer
        assert c.messages.count_tokens(model="tiny", messages=USER).input_tokens > 0
    for path in ("/v1/messages", "/v1/messages/count_tokens"):  # no key at all
        response = httpx.post(
            url + path, json={"model": "tiny", "max_tokens": 2, "messages": USER, "stream": True}
        )
        envelope(response, 401, "authentication_error")


def test_keepalive_pings_and_disconnect(keyed_server):
    headers = {"x-api-key": "s3cret", "anthropic-version": "2023-06-01"}
    body = {"model": "tiny", "max_tokens": 24, "messages": USER, "stream": True}
    with httpx.stream(
        "POST", keyed_server.url + "/v1/messages", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        events = sse_events(response)
    types = " ".join(e["type"] for e in events)  # pings may come anywhere after message_start
    assert re.fullmatch(
        r"message_start (ping )+(content_block_start (content_block_delta |ping )*"
        r"content_block_stop (ping )*)*message_delta message_stop",
        types,
    ), types
    assert events[-2]["usage"]["output_tokens"] >= 1

    body = dict(body, max_tokens=100000, ignore_eos=True)
    with httpx.stream(
        "POST", keyed_server.url + "/v1/messages", json=body, headers=headers, timeout=60
    ) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        message_id = json.loads(first[6:])["message"]["id"]
    assert keyed_server.wait_for_output(f"{message_id}-0 ended: abort")


def test_output_config_json_schema(client):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 12}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        model="tiny",
        max_tokens=200,
        messages=USER,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    data = json.loads(message.content[0].text)
    assert set(data) == {"answer", "sure"} and isinstance(data["sure"], bool)
    assert message.stop_reason == "end_turn"


def test_openapi_schema_lists_the_routes(http):
    paths = http.get("/v1/anthropic/openapi.json").json()["paths"]
    assert {"/v1/messages", "/v1/messages/count_tokens"} <= set(paths)


def test_qwen3_thinking_blocks(keyed_server):
    with anthropic_client(keyed_server.url, api_key="s3cret") as c:
        thinking = {"type": "enabled", "budget_tokens": 1024}
        message = c.messages.create(model="qwen3", max_tokens=12, messages=USER, thinking=thinking, **GREEDY)
        assert [b.type for b in message.content] == ["thinking"]  # a random model never closes </think>
        block = message.content[0]
        assert block.thinking.strip() and block.signature and "<think>" not in block.thinking
        assert message.stop_reason == "max_tokens"
        with c.messages.stream(
            model="qwen3", max_tokens=12, messages=USER, thinking=thinking, **GREEDY
        ) as stream:
            final = stream.get_final_message()
        assert final.content[0].thinking == block.thinking and final.content[0].signature == block.signature
        plain = c.messages.create(
            model="qwen3", max_tokens=12, messages=USER, thinking={"type": "disabled"}, **GREEDY
        )
        assert [b.type for b in plain.content] == ["text"]
        history = [
            *USER,
            {
                "role": "assistant",
                "content": [b.model_dump() for b in message.content]
                + [{"type": "text", "text": "Caching keeps results."}],
            },
            {"role": "user", "content": "More?"},
        ]
        follow = c.messages.create(model="qwen3", max_tokens=2, messages=history, thinking=thinking)
        count = c.messages.count_tokens(model="qwen3", messages=history, thinking=thinking)
        assert count.input_tokens == total_input(follow.usage)
