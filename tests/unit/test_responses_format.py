"""POST /v1/responses as plain data: the request translation (input items, tools, tool choice,
text format into chat messages and constraints) and the event builder (items and SSE events,
validated by the official OpenAI SDK's types). The live server's side: tests/live/test_api_responses.py."""

import pytest

from inference.api.common.errors import ApiError
from inference.api.responses.format import ResponseBuilder
from inference.api.responses.input import to_messages, to_structured, to_tool_choice, to_tools
from tests.support.responses_tools import WEATHER


# -- the request translation ------------------------------------------------------------------


def test_string_input_and_instructions():
    assert to_messages("Hi", "Be brief") == [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": "Hi"},
    ]


def test_items_become_chat_messages():
    items = [
        {"role": "developer", "content": "Use tools."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather "},
                {"type": "input_text", "text": "in Paris?"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Look"}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city":"Lyon"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": "rain"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "Sunny in Paris.", "annotations": []}],
        },
    ]
    assert to_messages(items, None) == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Look",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Lyon"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain", "name": "get_weather"},
        {"role": "assistant", "content": "Sunny in Paris."},
    ]


def test_context_items_come_first_and_are_stored_typed():
    from inference.api.responses.input import stored_items

    earlier = stored_items("Hi") + [
        {
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
        }
    ]
    assert earlier[0]["id"].startswith("msg_") and earlier[0]["content"] == [
        {"type": "input_text", "text": "Hi"}
    ]
    assert to_messages("Again", "Be brief", earlier) == [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again"},
    ]
    with pytest.raises(ApiError) as caught:
        to_messages([{"role": "nobody", "content": "x"}], None, earlier)
    assert caught.value.param == "input[0].role"  # numbered within this request's input


@pytest.mark.parametrize(
    "items, param",
    [
        ([], "input"),
        ([{"role": "robot", "content": "x"}], "input[0].role"),
        (
            [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
            "input[0].content[0].image_url",
        ),
        ([{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}], "input[0].content[0].type"),
        ([{"role": "user", "content": 3}], "input[0].content"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
        ([{"type": "item_reference", "id": "msg_1"}], "input[0].type"),
        ([{"content": "no role"}], "input[0]"),
        ([{"role": "system", "content": "only a system message"}], "input"),
    ],
)
def test_bad_items_name_the_field(items, param):
    with pytest.raises(ApiError) as caught:
        to_messages(items, None)
    assert caught.value.status == 400 and caught.value.param == param


def test_tools_and_tool_choice():
    chat, echo = to_tools([WEATHER, {"type": "web_search"}])
    assert chat == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert echo == [dict(WEATHER, strict=None)]
    assert to_tool_choice(None, echo) == (None, "auto")
    assert to_tool_choice("required", echo) == ("required", "required")
    assert to_tool_choice({"type": "function", "name": "get_weather"}, echo) == (
        {"type": "function", "function": {"name": "get_weather"}},
        {"type": "function", "name": "get_weather"},
    )
    for bad in ("always", {"type": "function", "name": "nope"}, {"type": "web_search"}):
        with pytest.raises(ApiError):
            to_tool_choice(bad, echo)
    with pytest.raises(ApiError):
        to_tool_choice("required", [])


def test_text_format():
    assert to_structured(None) == (None, {"format": {"type": "text"}})
    assert to_structured({"format": {"type": "json_object"}})[0] == {"type": "json_object"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    structured, echo = to_structured(
        {"format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}}
    )
    assert structured == {"type": "json_schema", "schema": schema}
    assert echo["format"] == {"type": "json_schema", "name": "A", "schema": schema, "strict": True}
    for bad in (
        {"type": "xml"},
        {"type": "json_schema", "schema": schema},
        {"type": "json_schema", "name": "A"},
    ):
        with pytest.raises(ApiError):
            to_structured({"format": bad})


# -- the event builder --------------------------------------------------------------------------


def _delta(text="", reasoning="", tool_calls=(), finish=None, tokens=1):
    usage = {"prompt_tokens": 10, "completion_tokens": 7, "cached_tokens": 4} if finish else None
    return {
        "kind": "delta",
        "index": 0,
        "text": text,
        "reasoning": reasoning,
        "tool_calls": list(tool_calls),
        "token_ids": [1] * tokens,
        "logprobs": None,
        "finish_reason": finish,
        "usage": usage,
        "error": None,
    }


def test_builder_items_and_events_validate_in_the_sdk():
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    builder = ResponseBuilder(
        "resp_1", "tiny", {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True}
    )
    events = builder.start()
    for delta in (
        _delta(reasoning="Think", tokens=2),
        _delta(tokens=2),
        _delta(reasoning=" more"),
        _delta(tokens=1),
        _delta(text="Hello"),
        _delta(text=" you"),
        _delta(tool_calls=[{"id": "call_1", "name": "f", "arguments": "{}"}], finish="tool_calls"),
    ):
        events += builder.feed(delta)
    adapter = TypeAdapter(ResponseStreamEvent)
    for event in events:
        adapter.validate_python(event, strict=False)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = Response.model_validate(events[-1]["response"])
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].content[0].text == "Think more"
    assert final.output_text == "Hello you"
    assert final.output[2].call_id == "call_1"
    assert final.usage.input_tokens_details.cached_tokens == 4
    assert final.usage.output_tokens_details.reasoning_tokens == 5  # held-back tokens before " more" count
    assert final.status == "completed"


def test_builder_length_and_failure():
    builder = ResponseBuilder("resp_2", "tiny", {})
    builder.feed(_delta(text="abc"))
    events = builder.feed(_delta(finish="length"))
    assert events[-1]["type"] == "response.incomplete"
    body = builder.body()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"

    failing = ResponseBuilder("resp_3", "tiny", {})
    events = failing.feed(dict(_delta(finish="error"), error="boom"))
    assert events[-1]["type"] == "response.failed" and "boom" in failing.body()["error"]["message"]

    empty = ResponseBuilder("resp_4", "tiny", {})
    empty.feed(_delta(finish="stop"))
    assert empty.body()["output"][0]["content"][0]["text"] == ""
