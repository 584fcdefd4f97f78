"""Formats whose calls are JSON: Hermes / Qwen 2.5 (``<tool_call>{json}</tool_call>``), Llama 3
(a bare JSON answer, or after ``<|python_tag|>``) and Mistral (``[TOOL_CALLS]...``)."""

from __future__ import annotations

import json
import re
from typing import List, Optional

from .base import Schemas, ToolCall, ToolFormat, call_from_object, json_values, new_tool_call


class HermesFormat(ToolFormat):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one call per pair of tags
    (Hermes, Qwen 2.5, Qwen 3)."""

    def __init__(self):
        super().__init__("hermes", ("<tool_call>",), "</tool_call>")

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        values = json_values(body)
        if len(values) != 1:
            raise ValueError("one call per <tool_call> tag")
        return [call_from_object(values[0])]


class Llama3Format(ToolFormat):
    """Llama 3.1+: the answer is ``{"name": ..., "parameters": {...}}`` (several separated by ``;``),
    optionally after ``<|python_tag|>``."""

    def __init__(self):
        super().__init__("llama3_json", ("<|python_tag|>",), None, json_answer=True)

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        values = json_values(body)
        return [call_from_object(v) for v in values]


_MISTRAL_HEADER = re.compile(r"\s*([\w.-]+)\s*(?:\[ARGS\])?\s*")


class MistralFormat(ToolFormat):
    """``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (Mistral v3) or
    ``[TOOL_CALLS]name[ARGS]{...}`` repeated (v11+); the calls run to the end of the output."""

    def __init__(self):
        super().__init__("mistral", ("[TOOL_CALLS]",), None)

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
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
            for value in json_values(part):
                for obj in value if isinstance(value, list) else [value]:
                    calls.append(call_from_object(obj))
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
