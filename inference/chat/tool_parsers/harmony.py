"""gpt-oss's Harmony format, in which the output is a sequence of messages rather than text with
calls in it (read by ``inference.chat.harmony_output.HarmonyParser``):

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

A message's header (up to ``<|message|>``) names its channel and, for a call, its recipient
(``to=functions.NAME``, in the channel part or the role part). ``<|call|>`` and ``<|return|>``
stop generation (their text is not in the output), so a message also ends where the output ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

from .base import Schemas, ToolCall, ToolFormat, json_object, new_tool_call

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_ROLE = re.compile(r"<\|start\|>\s*([^\s<]+)")


@dataclass(frozen=True)
class Header:
    channel: str  # "analysis", "commentary", "final", or "" when the header names none
    recipient: Optional[str]  # "functions.NAME" for a call
    role: str  # "assistant" unless the header names another (a tool's result: "functions.NAME")


def read_header(text: str) -> Header:
    channel, recipient, role = _CHANNEL.search(text), _RECIPIENT.search(text), _ROLE.search(text)
    return Header(
        channel.group(1) if channel else "",
        recipient.group(1) if recipient else None,
        role.group(1) if role else "assistant",
    )


class HarmonyFormat(ToolFormat):
    def __init__(self):
        super().__init__("harmony", (START, CHANNEL), None, stops=("<|call|>", "<|return|>"))

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        """``body``: a call message, its header then ``<|message|>`` then the JSON arguments."""
        header, _, arguments = body.partition(MESSAGE)
        recipient = read_header(header).recipient
        if not recipient:
            raise ValueError("a Harmony call names its recipient (to=functions.NAME)")
        name = recipient[len("functions.") :] if recipient.startswith("functions.") else recipient
        return [new_tool_call(name, json_object(arguments))]
