"""Formats framed by special tokens around a section of calls, each call a name and JSON arguments:

- ``kimi_k2`` (Kimi K2): ``<|tool_calls_section_begin|>`` then per call
  ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>``,
  then ``<|tool_calls_section_end|>``. The call's id in the model's words is
  ``functions.NAME:IDX``; the name is read out of it.
- ``deepseek_v3`` (DeepSeek V3.1 and later): ``<｜tool▁calls▁begin｜>`` then per call
  ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``, then ``<｜tool▁calls▁end｜>``.
  V3's older ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>`` reads too.

Both families reason between ``<think>`` and ``</think>``.
"""

from __future__ import annotations

import re
from typing import List, Optional

from .base import Schemas, ToolCall, ToolFormat, json_object, new_tool_call, only_space_between

THINK = ("<think>", "</think>")
_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.S
)
_KIMI_ID = re.compile(r"^(?:functions\.)?(.+?)(?::\d+)?$")
_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)<｜tool▁call▁end｜>", re.S)
_DEEPSEEK_V3_BODY = re.compile(r"^\s*([^\s`]+)\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


class KimiK2Format(ToolFormat):
    def __init__(self):
        super().__init__(
            "kimi_k2", ("<|tool_calls_section_begin|>",), "<|tool_calls_section_end|>", reasoning=THINK
        )

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        found = list(_KIMI_CALL.finditer(body))
        if not found:
            raise ValueError("no <|tool_call_begin|> in the section")
        only_space_between(body, found)
        calls = []
        for match in found:
            name = _KIMI_ID.match(match.group(1).strip())
            if name is None:
                raise ValueError("a Kimi call starts with functions.NAME:IDX")
            calls.append(new_tool_call(name.group(1), json_object(match.group(2))))
        return calls


class DeepSeekV3Format(ToolFormat):
    def __init__(self):
        super().__init__("deepseek_v3", ("<｜tool▁calls▁begin｜>",), "<｜tool▁calls▁end｜>", reasoning=THINK)

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        found = list(_DEEPSEEK_CALL.finditer(body))
        if not found:
            raise ValueError("no <｜tool▁call▁begin｜> in the calls")
        only_space_between(body, found)
        calls = []
        for match in found:
            head, rest = match.group(1).strip(), match.group(2)
            if head == "function" and _DEEPSEEK_V3_BODY.match(rest):  # V3: the name follows the separator
                head, rest = _DEEPSEEK_V3_BODY.match(rest).groups()
            calls.append(new_tool_call(head, json_object(rest)))
        return calls
