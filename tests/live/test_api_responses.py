"""POST /v1/responses on a live `omlx serve` driven by the official OpenAI SDK with strict response
validation (the request translation and the event builder as plain data:
tests/unit/test_responses_format.py)."""

import json

import httpx
import openai
import pytest

from tests.support.responses_tools import WEATHER
from tests.support.sdk_clients import openai_client

# -- the live server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(omlx_server):
    with openai_client(omlx_server.url) as c:
        yield c


def test_string_input(client):
    response = client.responses.create(
        model="tiny",
        input="Tell me about caching.",
        max_output_tokens=8,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.model == "tiny"
    message = response.output[-1]
    assert message.type == "message" and message.id.startswith("msg_") and message.role == "assistant"
    assert response.output_text == message.content[0].text and response.output_text
    assert response.usage.output_tokens == 8
    assert response.usage.total_tokens == response.usage.input_tokens + 8
    assert response.max_output_tokens == 8 and response.temperature == 0


def test_messages_with_instructions(client):
    items = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]},
        {"role": "user", "content": [{"type": "input_text", "text": "More?"}]},
    ]
    plain = client.responses.create(model="tiny", input=items, max_output_tokens=4, temperature=0)
    told = client.responses.create(
        model="tiny", input=items, instructions="Answer in French.", max_output_tokens=4, temperature=0
    )
    assert told.instructions == "Answer in French."
    assert told.usage.input_tokens > plain.usage.input_tokens  # the instructions reached the prompt


def test_stream_events(client):
    kwargs = dict(model="tiny", input="Stream this.", max_output_tokens=10, temperature=0)
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[2:5] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        f"response.{whole.status}",
    ]
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    assert events[-1].response.output_text == text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_stream_helper_and_stop(client):
    kwargs = dict(model="tiny", input="Use the helper.", max_output_tokens=16, temperature=0)
    text = client.responses.create(**kwargs, extra_body={"ignore_eos": True}).output_text
    stop = text[3:6]
    assert stop.strip()
    # stop (vLLM's extension) ends the output early: the SDK helper wants response.completed
    with client.responses.stream(**kwargs, extra_body={"stop": [stop]}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.completed_at is not None
    assert "".join(deltas) == final.output_text == text[: text.index(stop)]


def test_max_output_tokens_incomplete(client):
    response = client.responses.create(
        model="tiny", input="Go on forever.", max_output_tokens=3, extra_body={"ignore_eos": True}
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3
    assert response.output[-1].status == "incomplete"


def test_cached_tokens_on_repeat(client):
    prompt = "A prompt sent twice to the Responses API, the second time its prefix comes from the cache."
    first = client.responses.create(model="tiny", input=prompt, max_output_tokens=2, temperature=0)
    again = client.responses.create(model="tiny", input=prompt, max_output_tokens=2, temperature=0)
    assert again.usage.input_tokens == first.usage.input_tokens
    assert again.usage.input_tokens_details.cached_tokens > first.usage.input_tokens_details.cached_tokens


def test_function_call_output_round_trip(client):
    items = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_abc",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_abc", "output": "sunny, 21 C"},
    ]
    without = client.responses.create(model="tiny", input=items[:1], max_output_tokens=2, temperature=0)
    response = client.responses.create(model="tiny", input=items, max_output_tokens=4, temperature=0)
    assert response.status in ("completed", "incomplete")
    assert (
        response.usage.input_tokens > without.usage.input_tokens + 5
    )  # the call and its output were rendered


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(
        model="tiny",
        input="My name is Ada. Remember it.",
        max_output_tokens=5,
        temperature=0,
        instructions="You are terse.",
    )
    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    alone = client.responses.create(
        model="tiny", input="What is my name?", max_output_tokens=3, temperature=0, store=False
    )
    second = client.responses.create(
        model="tiny",
        input="What is my name?",
        max_output_tokens=3,
        temperature=0,
        previous_response_id=first.id,
    )
    assert second.previous_response_id == first.id
    # the first turn (without its instructions: they do not carry over) and its answer were in the prompt
    assert second.usage.input_tokens >= alone.usage.input_tokens + 10
    assert second.usage.input_tokens_details.cached_tokens > 0
    events = list(
        client.responses.create(
            model="tiny",
            input=[{"role": "user", "content": "And now?"}],
            max_output_tokens=3,
            temperature=0,
            previous_response_id=second.id,
            stream=True,
        )
    )
    third_id = events[0].response.id
    third = client.responses.retrieve(third_id)
    assert third.previous_response_id == second.id
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens

    items = client.responses.input_items.list(second.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [
        ("message", "user", "What is my name?")
    ]
    assert items.data[0].id.startswith("msg_")

    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(alone.id)  # store=False
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", input="x", previous_response_id=third_id)
    assert first.id in str(caught.value)  # the chain is broken where the deleted response was


def test_input_items_pages(client):
    items = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    response = client.responses.create(model="tiny", input=items, max_output_tokens=1)
    listed = client.responses.input_items.list(response.id, order="asc", limit=2)
    assert [i.content[0].text for i in listed.data] == ["turn 0", "turn 1"] and listed.has_more
    every = [i.content[0].text for i in client.responses.input_items.list(response.id, order="asc", limit=2)]
    assert every == [f"turn {i}" for i in range(5)]  # the SDK pages with after=
    newest = client.responses.input_items.list(response.id)
    assert newest.data[0].content[0].text == "turn 4"


def test_tools_reach_the_template(client):
    kwargs = dict(model="tiny", input="Weather in Paris?", max_output_tokens=3, temperature=0)
    plain = client.responses.create(**kwargs)
    response = client.responses.create(tools=[WEATHER, {"type": "web_search"}], **kwargs)
    assert [t.name for t in response.tools] == ["get_weather"] and response.tool_choice == "auto"
    assert response.usage.input_tokens > plain.usage.input_tokens + 10


def test_raw_stream_framing(omlx_server):
    body = {"model": "tiny", "input": "Frame it.", "max_output_tokens": 3, "stream": True}
    with httpx.stream("POST", omlx_server.url + "/v1/responses", json=body, timeout=60) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        text = "".join(reply.iter_text())
    blocks = [b for b in text.split("\n\n") if b.strip() and not b.startswith(":")]
    for block in blocks:
        event_line, data_line = block.split("\n")
        assert event_line.split(": ", 1)[1] == json.loads(data_line.split(": ", 1)[1])["type"]
    assert json.loads(blocks[-1].split("\n")[1][6:])["type"] in ("response.completed", "response.incomplete")


def test_qwen3_reasoning_item(serve):
    """The test qwen3 model's prompt opens <think> and a random model never closes it: all its
    output is reasoning, unless reasoning.effort is "none" (enable_thinking false)."""
    # The server of tests/live/test_api_chat_tools.py (one test model per family), shared.
    server = serve(models={arch: (arch, "tiny") for arch in ("qwen2", "qwen3", "llama", "mistral")})
    with openai_client(server.url) as client:
        kwargs = dict(model="qwen3", input="Why is the sky blue?", max_output_tokens=12, temperature=0)
        response = client.responses.create(**kwargs)
        reasoning = response.output[0]
        assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_") and reasoning.content[0].text
        assert response.usage.output_tokens_details.reasoning_tokens == response.usage.output_tokens == 12
        assert response.output_text == ""
        events = list(client.responses.create(stream=True, **kwargs))
        deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        assert deltas == reasoning.content[0].text
        assert [e for e in events if e.type == "response.reasoning_text.done"][0].text == deltas

        plain = client.responses.create(reasoning={"effort": "none"}, **kwargs)
        assert [item.type for item in plain.output] == ["message"] and plain.output_text
        assert plain.usage.output_tokens_details.reasoning_tokens == 0
        assert plain.reasoning.effort == "none"


def test_json_schema_format(client):
    # bounded values: a random-weight model never ends an unbounded string or number by itself
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 12}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    kwargs = dict(
        model="tiny",
        input="Answer in JSON.",
        max_output_tokens=64,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
    )
    response = client.responses.create(**kwargs)
    assert response.status == "completed"
    value = json.loads(response.output_text)
    assert set(value) == {"answer", "sure"} and len(value["answer"]) <= 12 and isinstance(value["sure"], bool)
    assert response.text.format.type == "json_schema" and response.text.format.name == "answer"
    events = list(client.responses.create(stream=True, **kwargs))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == response.output_text

    anything = client.responses.create(
        model="tiny",
        input="JSON please.",
        max_output_tokens=48,
        temperature=0,
        text={"format": {"type": "json_object"}},
    )
    if anything.status == "completed":  # an object can be unbounded: only a finished one must parse
        assert isinstance(json.loads(anything.output_text), dict)
    assert anything.output_text.lstrip().startswith("{")


def test_tool_choice_required(client):
    response = client.responses.create(
        model="tiny",
        input="Weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=64,
        temperature=0,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    assert calls[0].id.startswith("fc_")
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    assert response.tool_choice == "required" and response.tools[0].name == "get_weather"

    events = list(
        client.responses.create(
            model="tiny",
            input="Weather in Paris?",
            tools=[WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=64,
            temperature=0,
            stream=True,
        )
    )
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and json.loads(done[0].arguments)["city"]


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "tiny"}, 400, "input"),
        ({"model": "tiny", "input": 5}, 400, "input"),
        ({"model": "tiny", "input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"model": "tiny", "input": "x", "temperature": -1}, 400, "temperature"),
        ({"model": "tiny", "input": "x", "tool_choice": "always"}, 400, "tool_choice"),
        ({"model": "tiny", "input": "x", "text": {"format": {"type": "xml"}}}, 400, "text.format.type"),
        ({"model": "tiny", "input": "x", "previous_response_id": "resp_1"}, 400, "previous_response_id"),
        (
            {
                "model": "tiny",
                "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
            },
            400,
            "input[0].content[0].type",
        ),
        ({"model": "nope", "input": "x"}, 404, "model"),
    ],
)
def test_bad_requests(omlx_server, body, status, param):
    reply = httpx.post(omlx_server.url + "/v1/responses", json=body, timeout=60)
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["message"] and error["param"] is not None and error["param"].startswith(param)


def test_bad_request_through_the_sdk(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="x")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", input=[{"role": "user", "content": "x"}], max_output_tokens=-1)
    assert "max_output_tokens" in str(caught.value)
