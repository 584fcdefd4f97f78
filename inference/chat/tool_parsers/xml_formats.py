"""Formats whose arguments are tagged text, one value per tag, typed by the tool's schema:

- ``qwen3_xml`` (Qwen3-Coder, Qwen3.5): ``<tool_call>\\n<function=NAME>\\n<parameter=ARG>\\nVALUE\\n
  </parameter>\\n...</function>\\n</tool_call>``. A value is text (one newline on each side is
  part of the markup); it becomes the type the tool's schema gives the parameter, else stays a
  string.
- ``glm45`` (GLM 4.5, 4.6, 4.7): ``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>
  \\n</tool_call>`` (4.7 drops the newlines). The template writes strings bare and other values
  as JSON: a value is typed by the schema, and without one it is the JSON value it spells, else
  a string. GLM reasons between ``<think>`` and ``</think>``.
"""

from __future__ import annotations

import re
from typing import List, Optional

from .base import Schemas, ToolCall, ToolFormat, new_tool_call, only_space_between, typed_value

_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)
_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _unwrap(value: str) -> str:
    """The value between its tags, less the newline the format puts on each side."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class Qwen3XmlFormat(ToolFormat):
    def __init__(self):
        super().__init__("qwen3_xml", ("<tool_call>",), "</tool_call>")

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        functions = list(_FUNCTION.finditer(body))
        if not functions:
            raise ValueError("no <function=...> in the call")
        only_space_between(body, functions)
        calls = []
        for function in functions:
            name = function.group(1).strip()
            parameters = list(_PARAMETER.finditer(function.group(2)))
            only_space_between(function.group(2), parameters)
            arguments = {
                p.group(1).strip(): typed_value(_unwrap(p.group(2)), schemas, name, p.group(1).strip())
                for p in parameters
            }
            calls.append(new_tool_call(name, arguments))
        return calls


class Glm45Format(ToolFormat):
    def __init__(self):
        super().__init__("glm45", ("<tool_call>",), "</tool_call>", reasoning=("<think>", "</think>"))

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        first = body.find("<arg_key>")
        name = (body if first < 0 else body[:first]).strip()
        if not name or any(c.isspace() or c in "<>{}" for c in name):
            raise ValueError("a GLM call starts with the function's name")
        rest = "" if first < 0 else body[first:]
        pairs = list(_ARG.finditer(rest))
        only_space_between(rest, pairs)
        arguments = {
            k.strip(): typed_value(v, schemas, name, k.strip(), lenient=True)
            for k, v in (p.groups() for p in pairs)
        }
        return [new_tool_call(name, arguments)]
