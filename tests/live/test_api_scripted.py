"""Tool calls, reasoning, end-of-sequence and stop strings that a model really writes, end to end:
one live `omlx serve` with two scripted qwen3 models (inference/testkit/scripted.py: greedy
decoding writes a fixed text, then <|im_end|>), driven by the official openai and anthropic SDKs
(strict response validation) through OpenAI chat completions, OpenAI Responses and Anthropic
messages, each streaming and not.

- ``scripted-tool`` writes ``TOOL_REASONING</think>`` then two Hermes ``<tool_call>`` blocks and ends;
- ``scripted-text`` writes ``REASONING</think>`` then ``ANSWER`` and ends.
The qwen3 template opens ``<think>`` in the prompt, so both outputs start as reasoning."""

import json
import shutil

import pytest

from inference.testkit.scripted import build_scripted_model
from tests.support.sdk_clients import anthropic_client, openai_client
from tests.support.server import ServerProcess

ARGS = {"city": "Paris", "unit": "c"}
TOOL_REASONING = "The user asks for the weather in Paris. I will call the tool.\n"
CALLS = [("get_weather", ARGS), ("get_time", {})]
TOOL_SCRIPT = (
    TOOL_REASONING
    + "</think>\n\n"
    + "\n".join(
        "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
        for name, args in CALLS
    )
)
REASONING = "Two plus two is four.\n"
ANSWER = "The answer is 4. Have a nice day!"
TEXT_SCRIPT = REASONING + "</think>\n\n" + ANSWER
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
TIME_SCHEMA = {"type": "object", "properties": {}}
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": SCHEMA},
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "The time now", "parameters": TIME_SCHEMA},
    },
]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
MARKUP = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>", '{"name"')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = tmp_path_factory.mktemp("scripted-models")
    build_scripted_model(models / "scripted-tool", TOOL_SCRIPT)
    build_scripted_model(models / "scripted-text", TEXT_SCRIPT)
    process = ServerProcess(["--model-dir", str(models)], tmp_path_factory.mktemp("omlx-home-scripted"))
    yield process
    process.stop()
    shutil.rmtree(models, ignore_errors=True)


@pytest.fixture(scope="module")
def oai(server):
    with openai_client(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def claude(server):
    with anthropic_client(server.url) as c:
        yield c


def _clean(*texts):
    for text in texts:
        assert not any(m in (text or "") for m in MARKUP), text


# --- OpenAI chat completions --------------------------------------------------------------------


def _chat(oai, model, **kwargs):
    """(message-like dict, finish_reason) of the whole reply, and the same assembled from a stream."""
    args = {"model": model, "messages": USER, "temperature": 0, "max_tokens": 200, **kwargs}
    reply = oai.chat.completions.create(**args).choices[0]
    message = reply.message
    whole = {
        "content": message.content or "",
        "reasoning": (message.model_extra or {}).get("reasoning_content"),
        "calls": [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []],
    }
    streamed = {"content": "", "reasoning": "", "calls": {}}
    finish = None
    for chunk in oai.chat.completions.create(stream=True, **args):
        delta = chunk.choices[0].delta
        _clean(delta.content, (delta.model_extra or {}).get("reasoning_content"))
        streamed["content"] += delta.content or ""
        streamed["reasoning"] += (delta.model_extra or {}).get("reasoning_content") or ""
        for call in delta.tool_calls or []:
            id_, name, arguments = streamed["calls"].get(call.index, ("", "", ""))
            streamed["calls"][call.index] = (
                id_ + (call.id or ""),
                name + (call.function.name or ""),
                arguments + (call.function.arguments or ""),
            )
        finish = chunk.choices[0].finish_reason or finish
    streamed["calls"] = [streamed["calls"][i] for i in sorted(streamed["calls"])]
    streamed["reasoning"] = streamed["reasoning"] or None
    return (whole, reply.finish_reason), (streamed, finish)


@pytest.mark.parametrize("parallel", [True, False])
def test_chat_tool_calls_are_parsed_into_tool_calls(oai, parallel):
    """Both calls, each a tool_calls entry (in the stream: index 0 then 1); with
    parallel_tool_calls false, the first only."""
    (whole, finish), (streamed, stream_finish) = _chat(
        oai, "scripted-tool", tools=CHAT_TOOLS, parallel_tool_calls=parallel
    )
    for reply, reason in ((whole, finish), (streamed, stream_finish)):
        assert reason == "tool_calls"
        assert reply["content"] == "" and reply["reasoning"] == TOOL_REASONING
        assert [(name, json.loads(arguments)) for _, name, arguments in reply["calls"]] == CALLS[
            : 2 if parallel else 1
        ]
        assert all(call_id.startswith("call_") for call_id, _, _ in reply["calls"])
    _clean(whole["content"], whole["reasoning"])


def test_chat_reasoning_answer_and_eos(oai):
    (whole, finish), (streamed, stream_finish) = _chat(oai, "scripted-text")
    assert finish == stream_finish == "stop"  # end-of-sequence
    assert whole == streamed == {"content": ANSWER, "reasoning": REASONING, "calls": []}


def test_chat_stop_strings_cut_the_answer_and_the_reasoning(oai):
    (whole, finish), (streamed, stream_finish) = _chat(oai, "scripted-text", stop=["4."])
    assert finish == stream_finish == "stop"
    assert whole == streamed == {"content": "The answer is ", "reasoning": REASONING, "calls": []}
    (whole, finish), (streamed, stream_finish) = _chat(oai, "scripted-text", stop=["four"])
    assert finish == stream_finish == "stop"
    assert whole == streamed == {"content": "", "reasoning": "Two plus two is ", "calls": []}


def test_chat_max_tokens_is_length_not_stop(oai):
    (whole, finish), (streamed, stream_finish) = _chat(oai, "scripted-text", max_tokens=3)
    assert finish == stream_finish == "length"
    assert whole == streamed and REASONING.startswith(whole["reasoning"]) and whole["content"] == ""


# --- OpenAI Responses -----------------------------------------------------------------------------

RESPONSE_TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": SCHEMA},
    {"type": "function", "name": "get_time", "description": "The time now", "parameters": TIME_SCHEMA},
]


def _responses(oai, model, **kwargs):
    """The whole response, and the streamed one (its response.completed) with the deltas joined."""
    args = dict(model=model, input=USER[0]["content"], temperature=0, **kwargs)
    whole = oai.responses.create(**args)
    deltas = {"reasoning": "", "text": "", "arguments": ""}
    final = None
    for event in oai.responses.create(stream=True, **args):
        if event.type == "response.reasoning_text.delta":
            deltas["reasoning"] += event.delta
        elif event.type == "response.output_text.delta":
            deltas["text"] += event.delta
        elif event.type == "response.function_call_arguments.delta":
            deltas["arguments"] += event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    return whole, final, deltas


def _items(response):
    """The output items without their ids (which differ between two responses)."""
    return [item.model_dump(exclude={"id", "call_id"}) for item in response.output]


def test_responses_tool_calls_are_function_call_items(oai):
    whole, streamed, deltas = _responses(oai, "scripted-tool", tools=RESPONSE_TOOLS)
    for response in (whole, streamed):
        assert response.status == "completed"
        reasoning, *calls = response.output
        assert reasoning.type == "reasoning" and [c.text for c in reasoning.content] == [TOOL_REASONING]
        assert [(c.type, c.name, json.loads(c.arguments), c.status) for c in calls] == [
            ("function_call", name, args, "completed") for name, args in CALLS
        ]
        assert all(c.call_id.startswith("call_") for c in calls) and response.output_text == ""
    assert _items(whole) == _items(streamed)
    assert deltas == {
        "reasoning": TOOL_REASONING,
        "text": "",
        "arguments": "".join(c.arguments for c in whole.output[1:]),
    }


def test_responses_reasoning_then_message(oai):
    whole, streamed, deltas = _responses(oai, "scripted-text")
    for response in (whole, streamed):
        assert response.status == "completed" and response.incomplete_details is None
        assert [item.type for item in response.output] == ["reasoning", "message"]
        assert response.output[0].content[0].text == REASONING and response.output_text == ANSWER
    assert _items(whole) == _items(streamed)
    assert deltas == {"reasoning": REASONING, "text": ANSWER, "arguments": ""}


def test_responses_max_output_tokens_is_incomplete(oai):
    whole, streamed, _ = _responses(oai, "scripted-text", max_output_tokens=16)
    for response in (whole, streamed):
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert _items(whole) == _items(streamed)


# --- Anthropic messages ---------------------------------------------------------------------------

ANTHROPIC_TOOLS = [
    {"name": "get_weather", "description": "Weather in a city", "input_schema": SCHEMA},
    {"name": "get_time", "description": "The time now", "input_schema": TIME_SCHEMA},
]
GREEDY = {"extra_body": {"temperature": 0}}  # this SDK has no temperature argument any more


def _messages(claude, model, **kwargs):
    """The whole message and the one the SDK's stream helper assembles, both as dicts without ids."""
    args = {"model": model, "max_tokens": 200, "messages": USER, **GREEDY, **kwargs}
    whole = claude.messages.create(**args)
    with claude.messages.stream(**args) as stream:
        for text in stream.text_stream:
            _clean(text)
        streamed = stream.get_final_message()

    def plain(message):
        blocks = [b.model_dump(exclude={"id", "signature"}, exclude_none=True) for b in message.content]
        return {"blocks": blocks, "stop_reason": message.stop_reason, "stop_sequence": message.stop_sequence}

    return plain(whole), plain(streamed)


@pytest.mark.parametrize("parallel", [True, False])
def test_anthropic_tool_calls_are_tool_use_blocks(claude, parallel):
    choice = {"tool_choice": {"type": "auto", "disable_parallel_tool_use": not parallel}}
    whole, streamed = _messages(claude, "scripted-tool", tools=ANTHROPIC_TOOLS, **choice)
    assert (
        whole
        == streamed
        == {
            "blocks": [{"type": "thinking", "thinking": TOOL_REASONING}]
            + [
                {"type": "tool_use", "name": name, "input": args}
                for name, args in CALLS[: 2 if parallel else 1]
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
        }
    )


def test_anthropic_thinking_text_and_end_turn(claude):
    whole, streamed = _messages(claude, "scripted-text")
    assert (
        whole
        == streamed
        == {
            "blocks": [{"type": "thinking", "thinking": REASONING}, {"type": "text", "text": ANSWER}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
        }
    )


def test_anthropic_stop_sequence_and_max_tokens(claude):
    whole, streamed = _messages(claude, "scripted-text", stop_sequences=["4."])
    assert (
        whole
        == streamed
        == {
            "blocks": [
                {"type": "thinking", "thinking": REASONING},
                {"type": "text", "text": "The answer is "},
            ],
            "stop_reason": "stop_sequence",
            "stop_sequence": "4.",
        }
    )
    whole, streamed = _messages(claude, "scripted-text", max_tokens=3)
    assert whole == streamed and whole["stop_reason"] == "max_tokens"
    [thinking] = whole["blocks"]
    assert REASONING.startswith(thinking["thinking"]) and thinking["thinking"]
