"""The output parsers on streamed fragments: every split point of real rendered outputs, markers
split across deltas, text around calls, several calls, malformed calls."""

import json

import pytest
from transformers import AutoTokenizer

from inference.chat.output import OutputParser, ParsedDelta, ToolChoiceParser
from inference.chat.tool_parsers import FORMATS, detect_tool_format
from tests.support.parsed_stream import names_and_args, parse_parts, splits

THINK = ("<think>", "</think>")
WEATHER = {"city": "Paris", "unit": "celsius", "note": 'naïve "quotes" <tags>'}


def parse(parts, **kwargs):
    return parse_parts(OutputParser(**kwargs), parts)


def assert_no_markup(out):
    for marker in ("<tool_call", "</tool_call", "<think", "</think", "[TOOL_CALLS", "<|python_tag|>"):
        assert marker not in out.text and marker not in out.reasoning


def rendered_output(model_dir, arch, content, calls, reasoning=None):
    """The assistant turn the family's template renders for ``calls``: what the model writes
    (for qwen3, after the ``<think>`` the generation prompt opened)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir(arch))
    user = [{"role": "user", "content": "What is the weather?"}]
    assistant = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ],
    }
    if reasoning:
        assistant["reasoning_content"] = reasoning
    prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=arch != "mistral")
    full = tokenizer.apply_chat_template(user + [assistant], tokenize=False)
    assert full.startswith(prompt)
    output = full[len(prompt) :]
    for end in ("<|im_end|>\n", "<|eot_id|>", "<|im_end|>"):
        if output.endswith(end):
            return output[: -len(end)]
    return output


@pytest.mark.parametrize(
    "arch,fmt", [("qwen2", "hermes"), ("qwen3", "hermes"), ("llama", "llama3_json"), ("mistral", "mistral")]
)
def test_rendered_calls_parse_at_every_split_point(model_dir, arch, fmt):
    calls = [("get_weather", WEATHER), ("get_time", {"zone": "CET"})]
    thinking = arch == "qwen3"
    output = rendered_output(model_dir, arch, "", calls, reasoning="Two tools." if thinking else None)
    tokenizer = AutoTokenizer.from_pretrained(model_dir(arch))
    assert detect_tool_format(tokenizer.chat_template, tokenizer.get_vocab()) is FORMATS[fmt]
    for parts in splits(output):
        out, _ = parse(
            parts, tool_format=FORMATS[fmt], reasoning=THINK if thinking else None, in_reasoning=thinking
        )
        assert names_and_args(out) == calls, parts
        assert out.text == "" and out.reasoning == ("Two tools.\n" if thinking else "")


def test_hermes_text_before_and_after_calls_at_every_split_point(model_dir):
    calls = [("get_weather", WEATHER)]
    output = rendered_output(model_dir, "qwen2", "Let me look that up.", calls) + "\nDone, see above."
    for parts in splits(output):
        out, deltas = parse(parts, tool_format=FORMATS["hermes"])
        assert names_and_args(out) == calls
        assert out.text == "Let me look that up.\nDone, see above."
        assert_no_markup(out)
        assert all(len(d.tool_calls) <= 1 for d in deltas)


def test_qwen3_reasoning_opened_by_the_prompt_then_a_call():
    output = (
        "I need the weather.\n</think>\n\nChecking.\n<tool_call>\n"
        + json.dumps({"name": "get_weather", "arguments": WEATHER})
        + "\n</tool_call>"
    )
    for parts in splits(output):
        out, _ = parse(parts, tool_format=FORMATS["hermes"], reasoning=THINK, in_reasoning=True)
        assert out.reasoning == "I need the weather.\n"
        assert out.text == "Checking."
        assert names_and_args(out) == [("get_weather", WEATHER)]


def test_reasoning_opened_by_the_model_and_reasoning_cut_short():
    for parts in splits("<think>step one</think>\n\nThe answer."):
        out, _ = parse(parts, reasoning=THINK)
        assert (out.reasoning, out.text) == ("step one", "The answer.")
    for parts in splits("still thinking </thi"):  # max_tokens ended inside the reasoning
        out, _ = parse(parts, reasoning=THINK, in_reasoning=True)
        assert (out.reasoning, out.text) == ("still thinking </thi", "")


def test_partial_markers_are_held_back_not_leaked():
    _, deltas = parse(["Hello <tool", "_ca"], tool_format=FORMATS["hermes"])
    assert deltas[0].text == "Hello" and deltas[1].text == ""
    assert deltas[2].text == " <tool_ca"  # the end: it was text after all
    out, _ = parse(["a < b and <t", "ag>"], tool_format=FORMATS["hermes"], reasoning=THINK)
    assert out.text == "a < b and <tag>"


@pytest.mark.parametrize(
    "fmt,output",
    [
        ("hermes", 'Sure. <tool_call>\n{"name": "f", "arguments": {bad json}\n</tool_call> after'),
        ("hermes", '<tool_call>{"arguments": {}}</tool_call>'),  # no name
        ("hermes", '<tool_call>{"name": "f", "arguments": {"a": 1'),  # cut short, unclosed
        ("llama3_json", '{"name": "f", "parameters": {"a": }'),
        ("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}'),
        ("mistral", "[TOOL_CALLS]f[ARGS]{oops}"),
    ],
)
def test_malformed_calls_come_back_as_text(fmt, output):
    for parts in splits(output):
        out, _ = parse(parts, tool_format=FORMATS[fmt])
        assert out.tool_calls == [] and out.text == output.strip()


def test_llama_json_answer_only_at_the_start_and_only_if_it_is_a_call():
    fmt = FORMATS["llama3_json"]
    out, _ = parse(["  ", '{"a": 1}'], tool_format=fmt)
    assert out.text == '{"a": 1}' and not out.tool_calls  # JSON, but not a call
    out, _ = parse(['Use {"name": "f", "parameters": {}}'], tool_format=fmt)
    assert out.text.startswith("Use {") and not out.tool_calls
    out, _ = parse(['<|python_tag|>{"name": "f", "parameters": {"x": 2}}; {"name": "g"}'], tool_format=fmt)
    assert names_and_args(out) == [("f", {"x": 2}), ("g", {})] and out.text == ""


def test_mistral_v11_calls_with_text_before():
    for parts in splits('Calling.[TOOL_CALLS]f[ARGS]{"a": [1, 2]}[TOOL_CALLS]g[ARGS]{}'):
        out, _ = parse(parts, tool_format=FORMATS["mistral"])
        assert out.text == "Calling." and names_and_args(out) == [("f", {"a": [1, 2]}), ("g", {})]


def test_ids_are_fresh_and_max_calls_drops_later_calls():
    two = '<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g"}</tool_call>'
    out, _ = parse([two], tool_format=FORMATS["hermes"])
    assert len({c.id for c in out.tool_calls}) == 2
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in out.tool_calls)
    out, _ = parse([two], tool_format=FORMATS["hermes"], max_calls=1)
    assert [c.name for c in out.tool_calls] == ["f"] and out.text == ""


def test_without_a_tool_format_text_passes_untouched():
    text = 'Plain <tool_call>{"name": "f"}</tool_call>  \n'
    for parts in splits(text):
        out, _ = parse(parts)
        assert out.text == text and not out.tool_calls


def test_tool_choice_parser_turns_the_json_into_one_call():
    parser = ToolChoiceParser()
    assert parser.feed('{"name": "f", ') == ParsedDelta()
    parser.feed('"arguments": {"a": 1}}')
    out = parser.finish()
    assert names_and_args(out) == [("f", {"a": 1})] and parser.tool_calls == 1
    cut = ToolChoiceParser()
    cut.feed('{"name": "f", "argu')
    assert cut.finish() == ParsedDelta(text='{"name": "f", "argu')
