"""Request options that constrain a chat's output: ``tools`` and ``tool_choice``, and
``response_format``, checked (ValueError for bad input) and mapped onto the engine's
``SamplingParams.structured`` ({"type": "json_object"} or {"type": "json_schema", "schema": ...}).

tool_choice "required" or a named function constrains the output to one JSON object
``{"name": <tool>, "arguments": {...}}`` that matches one allowed tool's parameters schema.
"""

from __future__ import annotations

from typing import List, Optional, Union

ToolChoice = Union[str, dict, None]


def check_tools(tools) -> Optional[List[dict]]:
    """``tools`` in OpenAI form ({"type": "function", "function": {"name", "description",
    "parameters"}}), or ValueError."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ValueError("tools: must be a list")
    names = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ValueError(f"{where}: only tools of type 'function' are supported")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ValueError(f"{where}.function: must be an object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.function.name: must be a non-empty string")
        if name in names:
            raise ValueError(f"{where}.function.name: {name!r} is given twice")
        names.add(name)
        if function.get("parameters") is not None and not isinstance(function["parameters"], dict):
            raise ValueError(f"{where}.function.parameters: must be a JSON Schema object")
    return tools or None


def check_tool_choice(tool_choice: ToolChoice, tools: Optional[List[dict]]) -> ToolChoice:
    """``tool_choice`` as given, or ValueError (a named function must be one of ``tools``)."""
    if tool_choice is None or tool_choice in ("none", "auto"):
        return tool_choice
    if tool_choice == "required":
        if not tools:
            raise ValueError("tool_choice: 'required' needs tools")
        return tool_choice
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if not isinstance(name, str):
            raise ValueError("tool_choice.function.name: must be a string")
        if name not in {t["function"]["name"] for t in tools or []}:
            raise ValueError(f"tool_choice: no tool named {name!r} in tools")
        return tool_choice
    raise ValueError(
        "tool_choice: must be 'none', 'auto', 'required' or "
        '{"type": "function", "function": {"name": ...}}'
    )


def forces_call(tool_choice: ToolChoice) -> bool:
    return tool_choice == "required" or isinstance(tool_choice, dict)


def tool_choice_structured(tools: Optional[List[dict]], tool_choice: ToolChoice) -> Optional[dict]:
    """The structured-output constraint of a forced tool choice, or None."""
    if not forces_call(tool_choice):
        return None
    allowed = tools or []
    if isinstance(tool_choice, dict):
        allowed = [t for t in allowed if t["function"]["name"] == tool_choice["function"]["name"]]
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["function"]["name"]},
                "arguments": t["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in allowed
    ]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return {"type": "json_schema", "schema": schema}


def response_format_structured(response_format) -> Optional[dict]:
    """The structured-output constraint of OpenAI's ``response_format``, or None; ValueError."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ValueError("response_format: must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise ValueError("response_format.json_schema: must be an object with a name and a schema")
        if not isinstance(spec.get("name"), str):
            raise ValueError("response_format.json_schema.name: must be a string")
        schema = spec.get("schema")
        if schema is None:
            schema = {}
        if not isinstance(schema, (dict, bool)):
            raise ValueError("response_format.json_schema.schema: must be a JSON Schema object")
        return {"type": "json_schema", "schema": schema}
    raise ValueError("response_format.type: must be 'text', 'json_object' or 'json_schema'")
