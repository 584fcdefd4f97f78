"""tools / tool_choice / response_format checks and their mapping onto SamplingParams.structured."""

import jsonschema
import pytest

from inference.chat.structured import (
    check_tool_choice,
    check_tools,
    response_format_structured,
    tool_choice_structured,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "now"}},
]


def test_required_allows_a_call_of_any_tool_and_nothing_else():
    structured = tool_choice_structured(check_tools(TOOLS), check_tool_choice("required", TOOLS))
    assert structured["type"] == "json_schema"
    schema = structured["schema"]
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Paris"}}, schema)
    jsonschema.validate({"name": "now", "arguments": {}}, schema)
    for wrong in (
        {"name": "get_weather", "arguments": {}},
        {"name": "other", "arguments": {}},
        {"name": "now"},
        {"name": "now", "arguments": {}, "extra": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


def test_named_choice_allows_only_that_tool():
    choice = {"type": "function", "function": {"name": "get_weather"}}
    schema = tool_choice_structured(TOOLS, check_tool_choice(choice, TOOLS))["schema"]
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "now", "arguments": {}}, schema)


def test_none_and_auto_constrain_nothing():
    assert tool_choice_structured(TOOLS, "auto") is None
    assert tool_choice_structured(TOOLS, "none") is None
    assert tool_choice_structured(TOOLS, None) is None


@pytest.mark.parametrize(
    "tools,choice,match",
    [
        ([{"type": "code_interpreter"}], None, r"tools\[0\]"),
        ([{"type": "function", "function": {"description": "no name"}}], None, r"tools\[0\].function.name"),
        (TOOLS + TOOLS[:1], None, "given twice"),
        ([{"type": "function", "function": {"name": "f", "parameters": "object"}}], None, "parameters"),
        (TOOLS, {"type": "function", "function": {"name": "missing"}}, "no tool named 'missing'"),
        (TOOLS, "sometimes", "tool_choice"),
        (None, "required", "needs tools"),
    ],
)
def test_bad_tools_and_choices_raise_value_error(tools, choice, match):
    with pytest.raises(ValueError, match=match):
        check_tool_choice(choice, check_tools(tools))


def test_response_format_mapping():
    assert response_format_structured(None) is None
    assert response_format_structured({"type": "text"}) is None
    assert response_format_structured({"type": "json_object"}) == {"type": "json_object"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert response_format_structured(
        {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}}
    ) == {"type": "json_schema", "schema": schema}
    for bad in (
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"schema": {}}},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": "object"}},
        "json",
    ):
        with pytest.raises(ValueError, match="response_format"):
            response_format_structured(bad)
