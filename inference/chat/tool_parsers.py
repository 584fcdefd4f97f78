"""Tool-call formats of model families, and how to read calls out of a model's output.

A format names the markers that open a call in the output (``starts``), the marker that closes
it (``end``; ``None`` when a call runs to the end of the output), and whether an answer that
begins with a bare JSON object is a call (``json_answer``, Llama 3). ``parse(body)`` reads the
calls between the markers and raises ValueError when the body is not a well-formed call.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import List, Optional, Tuple


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


def _call_from_object(obj, argument_keys=("arguments", "parameters")) -> ToolCall:
    if not isinstance(obj, dict) or "name" not in obj:
        raise ValueError("a tool call is an object with a name")
    for key in argument_keys:
        if key in obj:
            return new_tool_call(obj["name"], obj[key])
    return new_tool_call(obj["name"], {})


def _json_values(text: str) -> List[object]:
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


@dataclass(frozen=True)
class ToolFormat:
    name: str
    starts: Tuple[str, ...]
    end: Optional[str] = None
    json_answer: bool = False

    def parse(self, body: str) -> List[ToolCall]:
        raise NotImplementedError


class HermesFormat(ToolFormat):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one call per pair of tags
    (Hermes, Qwen 2.5, Qwen 3)."""

    def __init__(self):
        super().__init__("hermes", ("<tool_call>",), "</tool_call>")

    def parse(self, body: str) -> List[ToolCall]:
        values = _json_values(body)
        if len(values) != 1:
            raise ValueError("one call per <tool_call> tag")
        return [_call_from_object(values[0])]


class Llama3Format(ToolFormat):
    """Llama 3.1+: the answer is ``{"name": ..., "parameters": {...}}`` (several separated by ``;``),
    optionally after ``<|python_tag|>``."""

    def __init__(self):
        super().__init__("llama3_json", ("<|python_tag|>",), None, json_answer=True)

    def parse(self, body: str) -> List[ToolCall]:
        values = _json_values(body)
        return [_call_from_object(v) for v in values]


_MISTRAL_HEADER = re.compile(r"\s*([\w.-]+)\s*(?:\[ARGS\])?\s*")


class MistralFormat(ToolFormat):
    """``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (Mistral v3) or
    ``[TOOL_CALLS]name[ARGS]{...}`` repeated (v11+); the calls run to the end of the output."""

    def __init__(self):
        super().__init__("mistral", ("[TOOL_CALLS]",), None)

    def parse(self, body: str) -> List[ToolCall]:
        calls = []
        for part in body.split("[TOOL_CALLS]"):
            if part.strip():
                calls += self._parse_part(part)
        if not calls:
            raise ValueError("no tool call")
        return calls

    @staticmethod
    def _parse_part(part: str) -> List[ToolCall]:
        if part.lstrip()[:1] in ("[", "{"):
            calls = []
            for value in _json_values(part):
                for obj in value if isinstance(value, list) else [value]:
                    calls.append(_call_from_object(obj))
            return calls
        decoder, calls, pos = json.JSONDecoder(), [], 0
        while pos < len(part) and part[pos:].strip():
            header = _MISTRAL_HEADER.match(part, pos)
            if header is None or not header.group(1):
                raise ValueError("expected name[ARGS]{...}")
            try:
                arguments, pos = decoder.raw_decode(part, header.end())
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON: {exc}") from None
            calls.append(new_tool_call(header.group(1), arguments))
        return calls


FORMATS = {f.name: f for f in (HermesFormat(), Llama3Format(), MistralFormat())}


def detect_tool_format(chat_template: Optional[str], vocab) -> Optional[ToolFormat]:
    """The tool-call format a model writes, from its chat template (and vocabulary), or None."""
    template = chat_template if isinstance(chat_template, str) else ""
    if "[TOOL_CALLS]" in template:
        return FORMATS["mistral"]
    if "<tool_call>" in template and "<function=" not in template:
        return FORMATS["hermes"]
    if "<|python_tag|>" in template or ("<|start_header_id|>" in template and "ipython" in template):
        return FORMATS["llama3_json"]
    if "[TOOL_CALLS]" in vocab:
        return FORMATS["mistral"]
    if "<tool_call>" in vocab and "</tool_call>" in vocab:
        return FORMATS["hermes"]
    return None
