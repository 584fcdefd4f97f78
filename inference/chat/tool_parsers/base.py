"""What every tool-call format shares: the parsed ``ToolCall``, the ``ToolFormat`` description, and
turning argument text into typed values by the tool's JSON Schema.

A format names the markers that open a call in the output (``starts``), the marker that closes
it (``end``; ``None`` when a call runs to the end of the output), whether an answer that
begins with a bare JSON object is a call (``json_answer``, Llama 3), and the reasoning markers
its family writes when the model's files do not show them (``reasoning``), and the tokens after
which the tools answer, where generation must stop (``stops``; a model's config may not list
them among its EOS tokens).
``parse(body, schemas)`` reads the calls between the markers and raises ValueError when the
body is not a well-formed call; ``schemas`` maps each offered tool's name to its parameters
schema, for formats whose argument values are text (XML, GLM).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

Schemas = Dict[str, dict]  # tool name -> its "parameters" JSON Schema


@dataclass(frozen=True)
class ToolCall:
    id: str  # "call_" + 24 hex digits
    name: str
    arguments: str  # JSON text of an object

    def to_event(self) -> dict:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


def new_tool_call(name, arguments) -> ToolCall:
    """A call with a fresh id; ``arguments`` an object or the JSON text of one."""
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    if not isinstance(name, str) or not name:
        raise ValueError("a tool call needs a function name")
    if not isinstance(arguments, dict):
        raise ValueError("tool call arguments must be a JSON object")
    return ToolCall(f"call_{uuid.uuid4().hex[:24]}", name, json.dumps(arguments, ensure_ascii=False))


def call_from_object(obj, argument_keys=("arguments", "parameters")) -> ToolCall:
    if not isinstance(obj, dict) or "name" not in obj:
        raise ValueError("a tool call is an object with a name")
    for key in argument_keys:
        if key in obj:
            return new_tool_call(obj["name"], obj[key])
    return new_tool_call(obj["name"], {})


def json_values(text: str) -> List[object]:
    """Every JSON value in ``text``, separated by whitespace or semicolons; ValueError otherwise."""
    decoder, values, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ";"):
            pos += 1
        if pos == len(text):
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        values.append(value)
    if not values:
        raise ValueError("no tool call")
    return values


def json_object(text: str) -> dict:
    """``text`` as one JSON object (empty text: no arguments); ValueError otherwise."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


def only_space_between(text: str, matches) -> None:
    """ValueError unless ``matches`` cover ``text`` but for whitespace."""
    pos = 0
    for match in matches:
        if text[pos : match.start()].strip():
            raise ValueError(f"unexpected text {text[pos : match.start()].strip()[:40]!r}")
        pos = match.end()
    if text[pos:].strip():
        raise ValueError(f"unexpected text {text[pos:].strip()[:40]!r}")


@dataclass(frozen=True)
class ToolFormat:
    name: str
    starts: Tuple[str, ...]
    end: Optional[str] = None
    json_answer: bool = False
    reasoning: Optional[Tuple[str, str]] = None
    stops: Tuple[str, ...] = ()  # tokens that hand the turn to the tools: generation stops there

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        raise NotImplementedError


def _types(schema) -> List[str]:
    """The JSON types a parameter schema allows (from "type", else from "enum" or "anyOf")."""
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    if isinstance(schema.get("enum"), list):
        names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
        return list(dict.fromkeys(names.get(type(v), "object") for v in schema["enum"]))
    found = []
    for option in schema.get("anyOf") or schema.get("oneOf") or []:
        found += [k for k in _types(option) if k not in found]
    return found


def _convert(text: str, kind: str):
    """``text`` as a value of JSON type ``kind``; ValueError when it is not one."""
    stripped = text.strip()
    if kind == "string":
        return text
    if kind == "integer":
        return int(stripped)
    if kind == "number":
        number = float(stripped)
        return (
            int(number)
            if number.is_integer() and "." not in stripped and "e" not in stripped.lower()
            else number
        )
    if kind == "boolean":
        if stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
        raise ValueError("not a boolean")
    if kind == "null":
        if stripped.lower() in ("null", "none"):
            return None
        raise ValueError("not null")
    value = json.loads(stripped)
    if (kind == "object") != isinstance(value, dict) or (kind == "array") != isinstance(value, list):
        raise ValueError(f"not an {kind}")
    return value


def typed_value(text: str, schemas: Optional[Schemas], tool: str, parameter: str, lenient: bool = False):
    """The value of argument ``parameter`` of ``tool`` written as ``text``: converted to the
    first type its schema allows that the text converts to, else kept as the string. With no
    type known, the string (``lenient``: the JSON value the text is, if it is one)."""
    schema = ((schemas or {}).get(tool) or {}).get("properties", {}).get(parameter)
    kinds = [k for k in _types(schema) if k != "string"]
    if not kinds:
        if lenient and not _types(schema):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return text
        return text
    for kind in kinds:
        try:
            return _convert(text, kind)
        except (ValueError, json.JSONDecodeError):
            continue
    return text
