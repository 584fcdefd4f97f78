"""The tool-call formats of Qwen3-Coder/3.5 XML, GLM 4.5+, Kimi K2, DeepSeek V3.1, Gemma 3 and 4 and
gpt-oss Harmony: real renderings of each family's template (``tests.support.tool_family_templates``,
rendered by a test model's tokenizer) parsed at every split point, the families' reference
examples, typed arguments, malformed calls, and the rule that picks a model's format."""

import json

import pytest
from transformers import AutoTokenizer

from inference.chat.capabilities import capabilities, check_tool_parser
from inference.chat.harmony_output import HarmonyParser
from inference.chat.output import OutputParser
from inference.chat.reasoning import prompt_opens_reasoning
from inference.chat.template import template_messages
from inference.chat.tool_parsers import FORMATS, detect_tool_format
from tests.support.parsed_stream import names_and_args, parse_parts, splits
from tests.support.tool_family_templates import CHAT_TEMPLATES

THINK = ("<think>", "</think>")
WEATHER = {"city": "Paris", "unit": "celsius", "note": 'naïve "quotes" <tags> & {braces}'}
TIME = {"zone": "CET", "offset": 1, "exact": True, "fields": ["h", "m"], "extra": {"a": None}}
SCHEMAS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}, "note": {"type": "string"}},
    },
    "get_time": {
        "type": "object",
        "properties": {
            "zone": {"type": "string"},
            "offset": {"type": "integer"},
            "exact": {"type": "boolean"},
            "fields": {"type": "array"},
            "extra": {"type": "object"},
        },
    },
}
TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": s}}
    for n, s in SCHEMAS.items()
]
MARKUP = (
    "<tool_call",
    "</tool_call",
    "<function=",
    "<parameter=",
    "<arg_key>",
    "<arg_value>",
    "<|tool_call",
    "<|tool_calls_section",
    "<｜tool",
    "```tool_code",
    "<tool_call|>",
    "<|channel",
    "<channel|>",
    "<|message|>",
    "<|start|>",
    "<|end|>",
    "<|call|>",
    "<|constrain|>",
    "<think>",
    "</think>",
    "call:get_",
)
# Per family: the reasoning markers it writes, and the template kwargs under which its prompt opens them.
FAMILIES = {
    "qwen3_xml": (THINK, {}),
    "glm45": (THINK, {}),
    "kimi_k2": (THINK, {}),
    "deepseek_v3": (THINK, {"thinking": True}),
    "gemma3": (None, {}),
    "gemma4": (("<|channel>thought\n", "<channel|>"), {"enable_thinking": True}),
    "harmony": (None, {}),
}
ENDS = ("<|im_end|>\n", "<|im_end|>", "<｜end▁of▁sentence｜>", "<end_of_turn>\n", "<turn|>\n")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir("qwen2"))


def rendered_output(tokenizer, family, content, calls, reasoning=None):
    """What the model writes for ``calls`` by its family's template: the assistant turn of the
    rendered history, after the generation prompt. Returns (output, prompt)."""
    template, kwargs = CHAT_TEMPLATES[family], FAMILIES[family][1]
    user = [{"role": "user", "content": "What is the weather?"}]
    assistant = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ],
    }
    if reasoning:
        assistant["reasoning_content"] = reasoning
    render = dict(chat_template=template, tools=TOOLS, tokenize=False, **kwargs)
    prompt = tokenizer.apply_chat_template(template_messages(user), add_generation_prompt=True, **render)
    full = tokenizer.apply_chat_template(template_messages(user + [assistant]), **render)
    assert full.startswith(prompt), (prompt, full)
    output = full[len(prompt) :]
    for end in ENDS:
        if output.endswith(end):
            return output[: -len(end)], prompt
    return output, prompt


def parser_for(family, prompt, **kwargs):
    if family == "harmony":
        return HarmonyParser(schemas=SCHEMAS, **kwargs)
    markers = FAMILIES[family][0]
    return OutputParser(
        FORMATS[family],
        markers,
        in_reasoning=prompt_opens_reasoning(prompt, markers),
        schemas=SCHEMAS,
        **kwargs,
    )


def assert_no_markup(out):
    for marker in MARKUP:
        assert marker not in out.text and marker not in out.reasoning, marker


CASES = {  # name: (content, calls, reasoning)
    "single": ("", [("get_weather", WEATHER)], None),
    "parallel": ("", [("get_weather", WEATHER), ("get_time", TIME)], None),
    "reasoning_then_calls": ("", [("get_weather", WEATHER), ("get_time", TIME)], "I need two tools."),
    "text_then_call": ("Let me check.", [("get_time", TIME)], None),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("family", FAMILIES)
def test_rendered_calls_parse_at_every_split_point(tokenizer, family, case):
    content, calls, reasoning = CASES[case]
    if reasoning and family == "gemma3":
        pytest.skip("Gemma 3 has no reasoning markers")
    output, prompt = rendered_output(tokenizer, family, content, calls, reasoning)
    assert detect_tool_format(CHAT_TEMPLATES[family], {}) is FORMATS[family]
    for parts in splits(output):
        out, deltas = parse_parts(parser_for(family, prompt), parts)
        assert names_and_args(out) == calls, (family, parts)
        assert out.text.strip() == content, parts
        assert out.reasoning.strip() == (reasoning or ""), parts
        assert_no_markup(out)
        if len(parts) == len(output) and family not in (
            "kimi_k2",
            "deepseek_v3",
            "gemma3",
        ):  # one block, all calls
            assert all(len(d.tool_calls) <= 1 for d in deltas)  # each call as soon as it is closed
    one_call, _ = parse_parts(parser_for(family, prompt, max_calls=1), [output])
    assert names_and_args(one_call) == calls[:1]


# The families' own examples of their formats (as their documentation and reference parsers show).
REFERENCES = {
    "qwen3_xml": (
        "<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n<parameter=offset>\n1\n"
        "</parameter>\n<parameter=exact>\ntrue\n</parameter>\n</function>\n</tool_call>"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n</function>\n</tool_call>",
        [("get_time", {"zone": "CET", "offset": 1, "exact": True}), ("get_weather", {"city": "New\nYork"})],
    ),
    "glm45": (
        "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>CET</arg_value>\n<arg_key>fields</arg_key>\n"
        '<arg_value>["h"]</arg_value>\n</tool_call><tool_call>get_weather<arg_key>city</arg_key>'
        "<arg_value>Paris</arg_value></tool_call>",
        [("get_time", {"zone": "CET", "fields": ["h"]}), ("get_weather", {"city": "Paris"})],
    ),
    "kimi_k2": (
        "<|tool_calls_section_begin|> <|tool_call_begin|> functions.get_weather:0 "
        "<|tool_call_argument_begin|> "
        '{"city": "Paris"} <|tool_call_end|> <|tool_call_begin|> functions.get_time:1 '
        "<|tool_call_argument_begin|> {} <|tool_call_end|> <|tool_calls_section_end|>",
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    "deepseek_v3": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris"}<｜tool▁call▁end｜>'
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
        '```json\n{"zone": "CET"}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>",
        [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})],
    ),
    "gemma3": (
        "```tool_code\n[get_weather(city='Paris', unit=\"c\"), "
        'get_time(zone="CET", exact=True, extra=None)]\n```',
        [
            ("get_weather", {"city": "Paris", "unit": "c"}),
            ("get_time", {"zone": "CET", "exact": True, "extra": None}),
        ],
    ),
    "gemma4": (
        '<|tool_call>call:get_weather{city:<|"|>London, UK<|"|>,'
        "days:[1,2.5],deep:{ok:false,none:null}}<tool_call|>",
        [("get_weather", {"city": "London, UK", "days": [1, 2.5], "deep": {"ok": False, "none": None}})],
    ),
    "harmony": (
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather"
        '<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
        [("get_weather", {"city": "Paris"})],
    ),
}


@pytest.mark.parametrize("family", REFERENCES)
def test_reference_examples_parse(family):
    output, calls = REFERENCES[family]
    for parts in splits(output):
        out, _ = parse_parts(parser_for(family, ""), parts)
        assert names_and_args(out) == calls, parts
        assert out.text == ""
        assert_no_markup(out)


def test_text_arguments_are_typed_by_the_schema():
    xml = (
        "<tool_call>\n<function=f>\n<parameter=n>\n007\n</parameter>\n<parameter=s>\n007\n</parameter>\n"
        '<parameter=x>\n2.5\n</parameter>\n<parameter=o>\n{"a": [1]}\n</parameter>\n<parameter=maybe>\nnull\n'
        "</parameter>\n<parameter=bad>\nmany\n</parameter>\n<parameter=free>\n12\n</parameter>\n</function>\n</tool_call>"
    )
    schemas = {
        "f": {
            "properties": {
                "n": {"type": "integer"},
                "s": {"type": "string"},
                "x": {"type": "number"},
                "o": {"type": "object"},
                "maybe": {"type": ["integer", "null"]},
                "bad": {"type": "integer"},
            }
        }
    }
    out, _ = parse_parts(OutputParser(FORMATS["qwen3_xml"], schemas=schemas), [xml])
    assert names_and_args(out) == [
        ("f", {"n": 7, "s": "007", "x": 2.5, "o": {"a": [1]}, "maybe": None, "bad": "many", "free": "12"})
    ]
    glm = (
        "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>007</arg_value>\n"
        "<arg_key>free</arg_key>\n<arg_value>12</arg_value>\n</tool_call>"
    )
    out, _ = parse_parts(OutputParser(FORMATS["glm45"], schemas=schemas), [glm])
    assert names_and_args(out) == [("f", {"s": "007", "free": 12})]  # GLM writes non-strings as JSON


@pytest.mark.parametrize(
    "family,output",
    [
        ("qwen3_xml", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>"),
        ("qwen3_xml", '<tool_call>\n{"name": "f"}\n</tool_call>'),
        ("glm45", "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"),
        (
            "kimi_k2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{bad"
            "<|tool_call_end|><|tool_calls_section_end|>",
        ),
        (
            "deepseek_v3",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ),
        ("gemma3", "```tool_code\nimport os\n```"),
        ("gemma3", "```tool_code\nf(1, 2)\n```"),
        ("gemma4", '<|tool_call>call:f{a:<|"|>open}<tool_call|>'),
        ("gemma4", "<|tool_call>f{a:1}<tool_call|>"),
        (
            "kimi_k2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}",
        ),
    ],
)
def test_malformed_calls_come_back_as_text(family, output):
    for parts in splits(output):
        out, _ = parse_parts(OutputParser(FORMATS[family]), parts)
        assert out.tool_calls == [] and out.text == output, parts


def test_harmony_channels():
    final = (
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking."
        "<|end|><|start|>assistant<|channel|>final<|message|>It is sunny <b>."
    )
    for parts in splits(final):
        out, _ = parse_parts(HarmonyParser(), parts)
        assert (out.reasoning, out.text, out.tool_calls) == ("Think.", "Checking.It is sunny <b>.", []), parts
    call = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>'
    no_end = (
        "<|channel|>commentary<|message|>Checking.<|start|>assistant to=functions.get_time<|channel|>"
        'commentary json<|message|>{"zone": "CET"}'
    )  # a message may end where the next starts
    for parts in splits(no_end):
        out, _ = parse_parts(HarmonyParser(), parts)
        assert (out.text, names_and_args(out)) == ("Checking.", [("get_time", {"zone": "CET"})]), parts
    invented = (
        call + '<|start|>functions.f to=assistant<|channel|>commentary<|message|>{"t": 9}<|end|>'
        "<|start|>assistant<|channel|>final<|message|>Done."
    )  # <|call|> did not stop generation
    for parts in splits(invented):
        out, _ = parse_parts(HarmonyParser(), parts)
        assert (out.text, names_and_args(out)) == ("Done.", [("f", {"a": 1})]), parts
    out, _ = parse_parts(HarmonyParser(), ["Plain text, no header <|end"])  # the model ignored the format
    assert out.text == "Plain text, no header <|end"
    out, _ = parse_parts(HarmonyParser(), ["<|channel|>analysis<|message|>cut short", ""])
    assert (out.reasoning, out.text) == ("cut short", "")
    out, _ = parse_parts(HarmonyParser(), ["<|channel|>analysis<|message|>A<|end|><|start|>assistant<|chan"])
    assert (out.reasoning, out.text) == ("A", "")  # a header cut short says nothing
    out, _ = parse_parts(HarmonyParser(parse_tools=False), [call])
    assert out.tool_calls == [] and out.text == call[: -len("<|call|>")]
    out, _ = parse_parts(HarmonyParser(), [call.replace('{"a": 1}', "{oops")])
    assert out.tool_calls == [] and "{oops" in out.text


def test_tool_results_render_in_each_familys_form(tokenizer):
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "Sunny, 21 C"},
    ]
    expected = {
        "qwen3_xml": "<|im_start|>user\n<tool_response>\nSunny, 21 C\n</tool_response><|im_end|>",
        "glm45": "<|observation|>\n<tool_response>\nSunny, 21 C\n</tool_response>",
        "kimi_k2": (
            "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\nSunny, 21 C<|im_end|>"
        ),
        "deepseek_v3": "<｜tool▁output▁begin｜>Sunny, 21 C<｜tool▁output▁end｜>",
        "gemma3": "<start_of_turn>user\n```tool_output\nSunny, 21 C\n```\n<end_of_turn>",
        "gemma4": '<|tool_response>response:get_weather{value:<|"|>Sunny, 21 C<|"|>}<tool_response|>',
        "harmony": (
            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>Sunny, 21 C<|end|>"
        ),
    }
    for family, text in expected.items():
        prompt = tokenizer.apply_chat_template(
            template_messages(messages),
            chat_template=CHAT_TEMPLATES[family],
            tools=TOOLS,
            tokenize=False,
            add_generation_prompt=True,
        )
        assert text in prompt, family


class Tokenizer:
    """A tokenizer as ``capabilities`` sees one: a chat template and a vocabulary."""

    def __init__(self, template, vocab=()):
        self.chat_template, self._vocab = template, {t: i for i, t in enumerate(vocab)}

    def get_vocab(self):
        return self._vocab


def test_selection_rule():
    for family in FAMILIES:
        found = capabilities(Tokenizer(CHAT_TEMPLATES[family]))
        assert found.tool_format is FORMATS[family]
        assert found.reasoning == FAMILIES[family][0]
    plain = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert capabilities(Tokenizer(plain)).tool_format is None
    assert capabilities(Tokenizer(plain), model_type="gpt_oss").tool_format is FORMATS["harmony"]
    glm = capabilities(Tokenizer(plain), model_type="glm4_moe")  # the format brings its reasoning markers
    assert (glm.tool_format, glm.reasoning) == (FORMATS["glm45"], THINK)
    assert capabilities(Tokenizer(plain, ["<tool_call>", "</tool_call>"])).tool_format is FORMATS["hermes"]
    # The template wins over model_type and vocabulary; the setting wins over everything.
    kimi = Tokenizer(CHAT_TEMPLATES["kimi_k2"], ["[TOOL_CALLS]"])
    assert capabilities(kimi, model_type="gemma3").tool_format is FORMATS["kimi_k2"]
    assert capabilities(kimi, tool_parser="deepseek_v3").tool_format is FORMATS["deepseek_v3"]
    assert capabilities(kimi, tool_parser="none") == capabilities(kimi, tool_parser="none")
    assert capabilities(kimi, tool_parser="none").tool_format is None
    assert capabilities(kimi, tool_parser="none").reasoning == THINK
    gpt_oss = Tokenizer(CHAT_TEMPLATES["harmony"], ["<|end|>", "<|call|>", "<|return|>"])
    assert capabilities(gpt_oss).stop_token_ids == (1, 2)  # <|call|> ends the turn: the tool answers next
    assert capabilities(kimi).stop_token_ids == ()
    gemma4 = Tokenizer(CHAT_TEMPLATES["gemma4"], ["<|tool_call>", "<|tool_response>"])
    assert capabilities(gemma4).stop_token_ids == (1,)  # the tool's response comes next
    assert check_tool_parser("glm45") == "glm45" and check_tool_parser(None) is None
    with pytest.raises(ValueError, match="tool_parser"):
        check_tool_parser("glm5")


def test_the_setting_and_the_request_choose_the_parser_of_a_job():
    from inference.generation import GenerationJob, _parser

    tokenizer = Tokenizer(CHAT_TEMPLATES["kimi_k2"])
    call = REFERENCES["kimi_k2"][0]
    job = GenerationJob(
        "r", "m", {}, messages=[{"role": "user", "content": "hi"}], tools=TOOLS, tool_choice="auto"
    )

    def output(job, settings):
        found = capabilities(tokenizer, None, settings.get("tool_parser"))
        out, _ = parse_parts(_parser(job, found, "", None), [call])
        return names_and_args(out), out.text

    assert output(job, {}) == (REFERENCES["kimi_k2"][1], "")
    assert output(job, {"tool_parser": "none"}) == ([], call)  # the setting switches parsing off
    assert output(job, {"tool_parser": "harmony"}) == ([], call)  # no Harmony header: text
    assert output(GenerationJob(**dict(job.to_dict(), tool_choice="none")), {}) == ([], call)
    assert (
        output(GenerationJob(**dict(job.to_dict(), parallel_tool_calls=False)), {})[0]
        == REFERENCES["kimi_k2"][1][:1]
    )
