"""Tools, tool_choice, reasoning_content, response_format and chat_template_kwargs through a live
`omlx serve` serving one test model of each family, driven by the OpenAI SDK (strict validation).

The random-weight models never write tool-call markup or ``</think>`` by themselves (the factory
keeps special tokens out of their argmax; tests/live/test_api_scripted.py has a model that writes
calls and reasoning), so: tools + "auto" must come back well-formed with no call; the qwen3
model's prompt opens ``<think>``, so all its output is reasoning unless enable_thinking is false;
forced calls and JSON need the engine's ``structured`` constraint."""

import json

import jsonschema
import openai
import pytest

from tests.support.sdk_clients import openai_client

FAMILIES = ("qwen2", "qwen3", "llama", "mistral")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time now",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
ROUND = USER + [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0123456789abcdef01234567",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_0123456789abcdef01234567", "content": "Sunny, 21 C"},
]
MARKUP = ("<tool_call>", "</tool_call>", "<think>", "</think>", "[TOOL_CALLS]", "<|python_tag|>")


@pytest.fixture(scope="module")
def server(serve):
    """One test model per family, each under its arch's name; tests/live/test_api_responses.py shares it."""
    return serve(models={arch: (arch, "tiny") for arch in FAMILIES})


@pytest.fixture(scope="module")
def client(server):
    with openai_client(server.url) as c:
        yield c


def _extra(obj, name):
    return (obj.model_extra or {}).get(name)


def _check_calls(calls):
    for call in calls or []:
        assert call.id.startswith("call_") and call.type == "function"
        assert call.function.name in {t["function"]["name"] for t in TOOLS}
        assert isinstance(json.loads(call.function.arguments), dict)


@pytest.mark.parametrize("arch", FAMILIES)
def test_tools_with_auto_return_well_formed_output(client, arch):
    reply = client.chat.completions.create(
        model=arch,
        messages=USER,
        tools=TOOLS,
        tool_choice="auto",
        temperature=0,
        max_tokens=10,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    _check_calls(choice.message.tool_calls)
    assert choice.message.content and not any(m in choice.message.content for m in MARKUP)
    # The tools were offered: the prompt is longer than without them.
    bare = client.chat.completions.create(model=arch, messages=USER, temperature=0, max_tokens=1)
    assert reply.usage.prompt_tokens > bare.usage.prompt_tokens + 30

    stream = list(
        client.chat.completions.create(
            model=arch,
            messages=USER,
            tools=TOOLS,
            temperature=0,
            max_tokens=10,
            stream=True,
            parallel_tool_calls=False,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == choice.message.content
    assert stream[-1].choices[0].finish_reason == choice.finish_reason


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_tool_round_is_fed_back(client, arch):
    reply = client.chat.completions.create(
        model=arch, messages=ROUND, tools=TOOLS, temperature=0, max_tokens=4, reasoning_effort="low"
    )
    start = client.chat.completions.create(
        model=arch, messages=USER, tools=TOOLS, temperature=0, max_tokens=1
    )
    assert reply.usage.prompt_tokens > start.usage.prompt_tokens + 10  # the call and its result are in
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_tool_choice_none_offers_no_tools(client):
    none = client.chat.completions.create(
        model="qwen2", messages=USER, tools=TOOLS, tool_choice="none", max_tokens=1
    )
    bare = client.chat.completions.create(model="qwen2", messages=USER, max_tokens=1)
    assert none.usage.prompt_tokens == bare.usage.prompt_tokens


def test_qwen3_reasoning_streams_as_reasoning_content(client):
    stream = list(
        client.chat.completions.create(
            model="qwen3", messages=USER, temperature=0, max_tokens=16, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in stream if c.choices]
    reasoning = "".join(_extra(d, "reasoning_content") or "" for d in deltas)
    assert reasoning.strip() and all(not d.content for d in deltas)  # everything is reasoning
    assert stream[-1].choices[0].finish_reason == "length"
    assert not any(m in reasoning for m in MARKUP)

    reply = client.chat.completions.create(model="qwen3", messages=USER, temperature=0, max_tokens=16)
    assert _extra(reply.choices[0].message, "reasoning_content") == reasoning
    assert reply.choices[0].message.content == ""

    plain = client.chat.completions.create(
        model="qwen3",
        messages=USER,
        temperature=0,
        max_tokens=16,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert plain.choices[0].message.content and _extra(plain.choices[0].message, "reasoning_content") is None


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"tools": [{"type": "retrieval"}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": 7}, "tool_choice"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": "thinking"}, "chat_template_kwargs"),
        (
            {"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
            "response_format",
        ),
    ],
)
def test_bad_options_are_400(client, extra, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="qwen2", messages=USER, max_tokens=2, extra_body=extra)
    assert info.value.status_code == 400 and info.value.body["message"]


def test_bad_tool_call_arguments_in_messages_are_400(client):
    bad = [
        dict(
            ROUND[1],
            tool_calls=[
                dict(ROUND[1]["tool_calls"][0], function={"name": "get_weather", "arguments": "{oops"})
            ],
        )
    ]
    with pytest.raises(openai.BadRequestError, match="arguments"):
        client.chat.completions.create(model="qwen2", messages=USER + bad, max_tokens=2)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_tool_choice_required_and_named_return_a_valid_call(client, arch):
    for choice, names in (
        ("required", {"get_weather", "get_time"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
    ):
        reply = client.chat.completions.create(
            model=arch, messages=USER, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=200
        )
        result = reply.choices[0]
        assert result.finish_reason == "tool_calls" and result.message.content is None
        (call,) = result.message.tool_calls
        assert call.function.name in names
        tool = next(t for t in TOOLS if t["function"]["name"] == call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])

        stream = list(
            client.chat.completions.create(
                model=arch,
                messages=USER,
                tools=TOOLS,
                tool_choice=choice,
                temperature=0,
                max_tokens=200,
                stream=True,
            )
        )
        streamed = [tc for c in stream if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        assert [(tc.index, tc.function.name, tc.function.arguments) for tc in streamed] == [
            (0, call.function.name, call.function.arguments)
        ]
        assert stream[-1].choices[0].finish_reason == "tool_calls"


def test_json_schema_response_validates(client):
    # Bounded strings and numbers: a random model does not end an unbounded string by itself.
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "maxLength": 20},
            "score": {"type": "integer", "minimum": 0, "maximum": 99},
        },
        "required": ["answer", "score"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model="qwen3",
        messages=USER,
        temperature=0,
        max_tokens=200,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "result", "schema": schema, "strict": True},
        },
    )
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    reply = client.chat.completions.create(
        model="llama", messages=USER, temperature=0, max_tokens=200, response_format={"type": "json_object"}
    )
    content = reply.choices[0].message.content
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:  # a random model may write one endless string
        assert content.startswith("{")
