"""Rendering OpenAI-form conversations with each family's chat template through mlx-lm's
tokenizer, as the worker does: tools offered, tool calls and results fed back, template kwargs."""

import json

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from inference.chat.capabilities import capabilities
from inference.chat.reasoning import prompt_opens_reasoning
from inference.chat.template import check_template_kwargs, render_prompt, template_messages

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
ROUND = [
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "The tool knows.",
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_abc", "content": "Sunny, 21 C"},
]


@pytest.fixture(scope="module")
def tokenizers(model_dir):
    return {arch: load_tokenizer(model_dir(arch)) for arch in ("qwen2", "qwen3", "llama", "mistral")}


@pytest.mark.parametrize(
    "arch,call,result",
    [
        (
            "qwen2",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "<tool_response>\nSunny, 21 C\n</tool_response>",
        ),
        (
            "qwen3",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "<tool_response>\nSunny, 21 C\n</tool_response>",
        ),
        (
            "llama",
            '{"name": "get_weather", "parameters": {"city": "Paris"}}',
            "<|start_header_id|>ipython<|end_header_id|>\n\nSunny, 21 C<|eot_id|>",
        ),
        (
            "mistral",
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_abc"}]',
            '[TOOL_RESULTS]{"content": "Sunny, 21 C", "call_id": "call_abc"}[/TOOL_RESULTS]',
        ),
    ],
)
def test_tools_calls_and_results_render_in_the_family_format(tokenizers, arch, call, result):
    prompt = render_prompt(tokenizers[arch], ROUND, TOOLS)
    assert json.dumps(TOOLS[0]["function"]["parameters"]) in prompt  # the tools are offered
    assert "Answer briefly." in prompt  # developer is rendered as system
    assert call in prompt and result in prompt
    assert prompt.index(call) < prompt.index(result)
    plain = render_prompt(tokenizers[arch], ROUND[1:2])
    assert "get_weather" not in plain and "Weather in Paris?" in plain


def test_qwen_plain_messages_are_chatml(tokenizers):
    prompt = render_prompt(
        tokenizers["qwen2"], [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    )
    assert prompt == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"


def test_qwen3_thinking_follows_enable_thinking(tokenizers):
    tokenizer, markers = tokenizers["qwen3"], capabilities(tokenizers["qwen3"]).reasoning
    assert markers == ("<think>", "</think>")
    on = render_prompt(tokenizer, ROUND[1:2])
    off = render_prompt(tokenizer, ROUND[1:2], template_kwargs={"enable_thinking": False})
    assert on.endswith("<|im_start|>assistant\n<think>\n") and prompt_opens_reasoning(on, markers)
    assert off.endswith("<think>\n\n</think>\n\n") and not prompt_opens_reasoning(off, markers)
    # The reasoning of the current tool round is shown to the model again; the prompt reopens <think>.
    again = render_prompt(tokenizer, ROUND, TOOLS)
    assert "<think>\nThe tool knows.\n</think>" in again and prompt_opens_reasoning(again, markers)


def test_capabilities_per_family(tokenizers):
    found = {arch: capabilities(t) for arch, t in tokenizers.items()}
    assert {arch: c.tool_format.name for arch, c in found.items()} == {
        "qwen2": "hermes",
        "qwen3": "hermes",
        "llama": "llama3_json",
        "mistral": "mistral",
    }
    assert [arch for arch, c in found.items() if c.reasoning] == ["qwen3"]


def test_message_conversion():
    converted = template_messages(ROUND)
    assert converted[0]["role"] == "system" and converted[2]["content"] == ""
    assert converted[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert converted[3]["name"] == "get_weather"
    assert ROUND[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # input untouched
    bad = [
        dict(
            ROUND[2],
            tool_calls=[{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{not json"}}],
        )
    ]
    with pytest.raises(ValueError, match=r"messages\[0\].tool_calls\[0\].function.arguments"):
        template_messages(bad)
    with pytest.raises(ValueError, match="must be a JSON object"):
        template_messages([dict(ROUND[2], tool_calls=[{"function": {"name": "f", "arguments": "[1]"}}])])


def test_template_kwargs_cannot_override_the_call():
    assert check_template_kwargs({"enable_thinking": False}) == {"enable_thinking": False}
    with pytest.raises(ValueError, match="tokenize"):
        check_template_kwargs({"tokenize": False})
    with pytest.raises(ValueError):
        check_template_kwargs(["enable_thinking"])


def test_a_template_that_rejects_the_input_raises(tokenizers):
    with pytest.raises(Exception, match="unknown role"):
        render_prompt(tokenizers["mistral"], [{"role": "narrator", "content": "x"}])
