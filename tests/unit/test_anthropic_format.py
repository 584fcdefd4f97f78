"""The Anthropic layer without a server: requests turned into GenerationJob terms
(inference/api/anthropic/input.py), and generation events (contract 1) turned into Anthropic's
Message and stream events (inference/api/anthropic/format.py), checked against the official SDK's
types and its stream accumulator."""

import json

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from inference.api.anthropic.format import MessageBuilder, sse
from inference.api.anthropic.input import chat_messages, openai_tool_choice, openai_tools, template_kwargs
from inference.api.anthropic.schemas import InputMessage
from inference.api.common.errors import ApiError

EVENT = TypeAdapter(RawMessageStreamEvent)


def delta(text="", reasoning="", tool_calls=(), finish=None, usage=None):
    return {
        "kind": "delta",
        "index": 0,
        "text": text,
        "reasoning": reasoning,
        "tool_calls": list(tool_calls),
        "token_ids": [],
        "logprobs": None,
        "finish_reason": finish,
        "usage": usage,
        "error": None,
    }


USAGE = {"prompt_tokens": 30, "completion_tokens": 9, "cached_tokens": 12}


def run(events, stop_sequences=()):
    """Feed events; returns (stream events, the builder). Every stream event must validate."""
    builder = MessageBuilder("msg_test", "tiny", stop_sequences)
    out = builder.start_events(30)
    for event in events:
        out += builder.feed(event)
    for event in out:
        if event["type"] != "ping":  # the SDK drops pings before parsing: no type of its own
            EVENT.validate_python(event)
    return out, builder


def accumulated(stream):
    snapshot, bufs = None, {}
    for event in stream:
        if event["type"] != "ping":
            snapshot = accumulate_event(
                event=EVENT.validate_python(event), current_snapshot=snapshot, json_bufs=bufs
            )
    return snapshot


def test_text_stream_order_and_message():
    stream, builder = run([delta("Hel"), delta("lo"), delta(" there", finish="stop", usage=USAGE)])
    assert [e["type"] for e in stream] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert stream[0]["message"]["usage"]["input_tokens"] == 30
    message = Message.model_validate(builder.message())
    assert message.content[0].text == "Hello there"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens == 18 and message.usage.cache_read_input_tokens == 12
    assert message.usage.output_tokens == 9 and message.usage.cache_creation_input_tokens == 0
    final = accumulated(stream)
    assert final.content[0].text == "Hello there"
    assert final.usage.input_tokens == 18 and final.usage.cache_read_input_tokens == 12
    assert final.stop_reason == "end_turn"


def test_thinking_then_text_then_tool_use():
    call = {"id": "call_" + "ab" * 12, "name": "get_weather", "arguments": '{"city": "Paris"}'}
    stream, builder = run(
        [
            delta(reasoning="Let me "),
            delta(reasoning="think."),
            delta("Calling."),
            delta(tool_calls=[call]),
            delta(finish="tool_calls", usage=USAGE),
        ]
    )
    types = [(e["type"], e.get("delta", {}).get("type")) for e in stream]
    assert types == [
        ("message_start", None),
        ("ping", None),
        ("content_block_start", None),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_delta", "input_json_delta"),
        ("content_block_stop", None),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert [e["index"] for e in stream if "index" in e] == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    message = Message.model_validate(builder.message())
    thinking, text, tool = message.content
    assert thinking.thinking == "Let me think." and thinking.signature
    assert text.text == "Calling."
    assert tool.id == "toolu_" + "ab" * 12 and tool.name == "get_weather" and tool.input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    final = accumulated(stream)
    assert final.content[2].input == {"city": "Paris"}
    assert final.content[0].signature == thinking.signature
    assert final.stop_reason == "tool_use"


def test_stop_sequence_is_reported_and_removed():
    stream, builder = run(
        [delta("one two"), delta(" thr", finish="stop", usage=USAGE)], stop_sequences=["th", " thr"]
    )
    message = Message.model_validate(builder.message())
    assert message.content[0].text == "one two"
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == " thr"
    assert accumulated(stream).content[0].text == "one two"


def test_eos_with_stop_sequences_is_end_turn_and_length_is_max_tokens():
    _, builder = run([delta("abc", finish="stop", usage=USAGE)], stop_sequences=["zz"])
    assert builder.message()["stop_reason"] == "end_turn"
    _, builder = run([delta("abc", finish="length", usage=USAGE)])
    assert builder.message()["stop_reason"] == "max_tokens"


def test_empty_output_has_no_blocks():
    stream, builder = run([delta(finish="stop", usage=USAGE)])
    assert [e["type"] for e in stream] == ["message_start", "ping", "message_delta", "message_stop"]
    assert Message.model_validate(builder.message()).content == []


def test_sse_framing():
    frame = sse({"type": "ping"})
    assert frame == 'event: ping\ndata: {"type":"ping"}\n\n'


def messages(*items):
    return [InputMessage(**m) for m in items]


def test_system_string_blocks_and_system_messages_merge():
    as_string = chat_messages("Be brief.", messages({"role": "user", "content": "Hi"}))
    as_blocks = chat_messages(
        [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages({"role": "user", "content": [{"type": "text", "text": "Hi"}]}),
    )
    in_messages = chat_messages(
        None, messages({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})
    )
    expected = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert as_string == as_blocks == in_messages == expected


def test_tool_history_becomes_openai_form():
    out = chat_messages(
        None,
        messages(
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "need a tool", "signature": "x"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny"}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": True},
                    {"type": "brand_new_block", "payload": 1},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ),
    )
    assert out == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "need a tool",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
        {"role": "user", "content": "Thanks"},
    ]


@pytest.mark.parametrize(
    "content, fragment",
    [
        ([{"type": "image", "source": {"type": "file", "file_id": "file_1"}}], "image source"),
        (
            [{"type": "image", "source": {"type": "url", "url": "http://example.invalid/x.png"}}],
            "allow_remote_images",
        ),
        ([{"text": "no type"}], "'type'"),
        ([{"type": "text", "text": 5}], "text"),
        ([{"type": "tool_use", "id": "t", "name": "n", "input": {}}], "assistant"),
    ],
)
def test_bad_user_content_is_a_400(content, fragment):
    with pytest.raises(ApiError) as raised:
        chat_messages(None, messages({"role": "user", "content": content}))
    assert raised.value.status == 400 and fragment in raised.value.message


def test_unknown_role_is_a_400():
    with pytest.raises(ApiError, match="role"):
        chat_messages(None, messages({"role": "robot", "content": "beep"}))


def test_tools_and_tool_choice():
    tools = openai_tools(
        [
            {
                "name": "get_weather",
                "description": "Weather of a city",
                "cache_control": {"type": "ephemeral"},
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "custom", "name": "noop", "input_schema": {"type": "object"}},
        ]
    )
    assert [t["function"]["name"] for t in tools] == ["get_weather", "noop"]
    assert tools[0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    assert openai_tools([{"type": "web_search_20250305", "name": "web_search"}]) is None
    assert openai_tool_choice({"type": "auto"}, tools) == "auto"
    assert openai_tool_choice({"type": "any", "disable_parallel_tool_use": True}, tools) == "required"
    assert openai_tool_choice({"type": "none"}, tools) == "none"
    assert openai_tool_choice({"type": "tool", "name": "noop"}, tools) == {
        "type": "function",
        "function": {"name": "noop"},
    }
    assert openai_tool_choice(None, tools) is None
    for bad in ({"type": "tool", "name": "missing"}, {"type": "sometimes"}):
        with pytest.raises(ApiError):
            openai_tool_choice(bad, tools)
    with pytest.raises(ApiError, match="at least one"):
        openai_tool_choice({"type": "any"}, None)


def test_thinking_maps_to_enable_thinking():
    assert template_kwargs(None) == {}
    assert template_kwargs({"type": "enabled", "budget_tokens": 2048}) == {"enable_thinking": True}
    assert template_kwargs({"type": "disabled"}) == {"enable_thinking": False}
    with pytest.raises(ApiError):
        template_kwargs({"type": "enabled", "budget_tokens": "lots"})


def test_documents_read_as_text_and_errors_name_the_block():
    out = chat_messages(
        None,
        messages(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarise:"},
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "The file."},
                    },
                ],
            }
        ),
    )
    assert out == [{"role": "user", "content": "Summarise:\nThe file."}]
    with pytest.raises(ApiError, match=r"messages\[0\]\.content\[1\]: only documents"):
        chat_messages(
            None,
            messages(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Read:"},
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
                        },
                    ],
                }
            ),
        )
