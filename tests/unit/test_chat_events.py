"""From the engine's output events to OpenAI bodies, for a model that does call tools: the worker's
per-choice parser (chosen from the real tokenizer and rendered prompt) publishes contract-1 events,
and the OpenAI format turns them into chunks and a response that the openai SDK's own types
accept. The text is what the family's template renders for a call, cut into token-sized deltas."""

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from inference.api.openai.format import ChatFormat
from inference.chat.capabilities import capabilities
from inference.chat.template import render_prompt
from inference.engine.request import RequestOutput, Usage
from inference.generation import GenerationJob, _parser, _sink

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
USER = [{"role": "user", "content": "Weather in Oslo?"}]
CALLS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
OUTPUTS = {
    "qwen2": "One moment.\n" + CALLS + "\n" + CALLS.replace("Oslo", "Bergen"),
    "qwen3": "Two cities.\n</think>\n\nOne moment.\n" + CALLS + "\n" + CALLS.replace("Oslo", "Bergen"),
    "llama": '{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
    '{"name": "get_weather", "parameters": {"city": "Bergen"}}',
    "mistral": 'One moment.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
    '{"name": "get_weather", "arguments": {"city": "Bergen"}}]',
}


def run_choice(model_dir, arch, output, step=3, **job_fields):
    tokenizer = load_tokenizer(model_dir(arch))
    job = GenerationJob("chatcmpl-test", arch, {}, messages=USER, tools=TOOLS, **job_fields)
    prompt = render_prompt(tokenizer, USER, TOOLS)
    events = []
    sink = _sink(
        job.request_id,
        0,
        tokenizer,
        lambda _, event: events.append(event),
        _parser(job, capabilities(tokenizer, arch), prompt, None),
    )
    pieces = [output[i : i + step] for i in range(0, len(output), step)]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        sink(
            RequestOutput(
                job.request_id,
                piece,
                [7],
                None,
                "stop" if last else None,
                Usage(10, len(pieces)) if last else None,
            )
        )
    return events


@pytest.mark.parametrize("arch", list(OUTPUTS))
def test_events_chunks_and_response_of_a_tool_calling_answer(model_dir, arch):
    events = run_choice(model_dir, arch, OUTPUTS[arch])
    assert events[-1]["finish_reason"] == "tool_calls"
    calls = [c for e in events for c in e["tool_calls"]]
    assert [c["arguments"] for c in calls] == ['{"city": "Oslo"}', '{"city": "Bergen"}']
    text = "".join(e["text"] for e in events)
    assert text == ("" if arch == "llama" else "One moment.")
    reasoning = "".join(e["reasoning"] for e in events)
    assert reasoning == ("Two cities.\n" if arch == "qwen3" else "")

    fmt = ChatFormat("chatcmpl-test", arch)
    chunks = [fmt.delta_chunk(e) for e in events]
    chunks = [ChatCompletionChunk.model_validate(c) for c in fmt.start_chunks(1) + [c for c in chunks if c]]
    streamed = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.id, tc.function.name) for tc in streamed] == [
        (k, c["id"], "get_weather") for k, c in enumerate(calls)
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    choice = {
        "index": 0,
        "text": text,
        "reasoning": reasoning,
        "tool_calls": calls,
        "logprobs": None,
        "finish_reason": events[-1]["finish_reason"],
        "usage": events[-1]["usage"],
    }
    body = ChatCompletion.model_validate(
        fmt.response([choice], {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    )
    message = body.choices[0].message
    assert [tc.function.arguments for tc in message.tool_calls] == [c["arguments"] for c in calls]
    assert message.content == (text or None)
    assert (message.model_extra or {}).get("reasoning_content") == (reasoning or None)


def test_tool_choice_none_and_no_tools_leave_the_markup_as_text(model_dir):
    events = run_choice(model_dir, "qwen2", OUTPUTS["qwen2"], tool_choice="none")
    assert "".join(e["text"] for e in events) == OUTPUTS["qwen2"]
    assert events[-1]["finish_reason"] == "stop" and not any(e["tool_calls"] for e in events)


def test_parallel_tool_calls_false_keeps_the_first_call(model_dir):
    events = run_choice(model_dir, "mistral", OUTPUTS["mistral"], parallel_tool_calls=False)
    assert [c["arguments"] for e in events for c in e["tool_calls"]] == ['{"city": "Oslo"}']
