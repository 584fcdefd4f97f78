"""Splitting a choice's streamed output into answer text, reasoning and tool calls.

``OutputParser`` takes the text deltas of one choice as the engine produces them and returns, per
delta, what became certain: answer text, reasoning text and complete tool calls. Text that could
still be the start of a marker (``<think>``, ``</think>``, a tool-call tag) is held back until the
next delta settles it, so markup never reaches a stream, whatever the split points. A call whose
body is not a well-formed call (bad JSON, no name) is given back as text, markers included.

States: ``text`` (the answer), ``reasoning`` (inside ``<think>``), ``call`` (inside a call with an
end marker), ``tail`` (a call that runs to the end of the output: Mistral, Llama 3 JSON).
Whitespace next to tool calls is dropped, as is whitespace that starts the answer after reasoning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List, Optional

from .reasoning import Markers
from .tool_parsers import Schemas, ToolCall, ToolFormat, new_tool_call


@dataclass
class ParsedDelta:
    text: str = ""
    reasoning: str = ""
    tool_calls: List[ToolCall] = field(default_factory=list)

    def __iadd__(self, other: "ParsedDelta") -> "ParsedDelta":
        self.text += other.text
        self.reasoning += other.reasoning
        self.tool_calls += other.tool_calls
        return self


def _held_back(text: str, markers) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest


class OutputParser:
    """Parses one choice's output; ``feed(text)`` per delta, ``finish()`` once at the end.

    ``tool_format`` None: no tool calls are parsed. ``reasoning`` None: no reasoning is parsed;
    ``in_reasoning``: the prompt opened a reasoning block. ``max_calls``: later calls are dropped
    (``parallel_tool_calls: false``). ``schemas``: the offered tools' parameter schemas, which
    type the arguments of formats that write them as text.
    """

    def __init__(
        self,
        tool_format: Optional[ToolFormat] = None,
        reasoning: Optional[Markers] = None,
        in_reasoning: bool = False,
        max_calls: Optional[int] = None,
        schemas: Optional[Schemas] = None,
    ):
        self._format = tool_format
        self._schemas = schemas
        self._reasoning = reasoning
        self._max_calls = max_calls
        self._state = "reasoning" if (reasoning and in_reasoning) else "text"
        self._buf = ""  # text not yet classified
        self._marker = ""  # the marker that opened the current call
        self._space = ""  # whitespace held back: dropped if a tool call follows
        self._call_space = ""
        self._answer_started = False  # non-space answer text was emitted
        self._strip_answer = False  # drop leading whitespace of the answer (after reasoning)
        self.tool_calls = 0

    @property
    def _markers(self):
        markers = list(self._format.starts) if self._format else []
        if self._reasoning:
            markers.append(self._reasoning[0])
        return markers

    def feed(self, text: str) -> ParsedDelta:
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> ParsedDelta:
        out = self._drain(final=True)
        if self._state == "reasoning":
            out.reasoning += self._buf
        elif self._state in ("call", "tail"):
            self._close_call(self._buf, out, closed=False)
        else:
            self._text(self._buf, out)
        self._buf = ""
        if self._space and not self.tool_calls:
            out.text += self._space
        self._space = ""
        return out

    def _drain(self, final: bool) -> ParsedDelta:
        out = ParsedDelta()
        while self._buf:
            if self._state == "reasoning":
                end = self._reasoning[1]
                i = self._buf.find(end)
                if i < 0:
                    keep = 0 if final else _held_back(self._buf, (end,))
                    out.reasoning += self._buf[: len(self._buf) - keep]
                    self._buf = self._buf[len(self._buf) - keep :]
                    return out
                out.reasoning += self._buf[:i]
                self._buf = self._buf[i + len(end) :]
                self._state, self._strip_answer = "text", True
            elif self._state == "call":
                i = self._buf.find(self._format.end)
                if i < 0:
                    return out
                body, self._buf = self._buf[:i], self._buf[i + len(self._format.end) :]
                self._close_call(body, out, closed=True)
                self._state = "text"
            elif self._state == "tail":
                return out  # everything to the end is the call
            else:
                if not self._scan_text(out, final):
                    return out
        return out

    def _scan_text(self, out: ParsedDelta, final: bool) -> bool:
        """Handle answer text in the buffer; True if the state changed and there is more to do."""
        if self._format and self._format.json_answer and not self._answer_started and not self.tool_calls:
            stripped = self._buf.lstrip()
            if not stripped and not final:
                return False  # only whitespace so far: it may precede a JSON call
            if stripped.startswith("{"):
                self._call_space = ""
                self._state, self._marker, self._buf = "tail", "", stripped
                return True
        hits = [(self._buf.find(m), m) for m in self._markers]
        hits = [(i, m) for i, m in hits if i >= 0]
        if not hits:
            keep = 0 if final else _held_back(self._buf, self._markers)
            self._text(self._buf[: len(self._buf) - keep], out)
            self._buf = self._buf[len(self._buf) - keep :]
            return False
        i, marker = min(hits)
        self._text(self._buf[:i], out)
        self._buf = self._buf[i + len(marker) :]
        if self._reasoning and marker == self._reasoning[0]:
            self._state = "reasoning"
        else:
            self._call_space, self._space = self._space, ""  # given back if the call is malformed
            self._marker = marker
            self._state = "call" if self._format.end else "tail"
        return True

    def _text(self, text: str, out: ParsedDelta) -> None:
        if self._strip_answer:
            text = text.lstrip()
            if not text:
                return
            self._strip_answer = False
        if not self._format:
            out.text += text
            return
        body = text.rstrip()
        if body:
            out.text += self._space + body
            self._space = ""
            self._answer_started = True
        self._space += text[len(body) :]

    def _close_call(self, body: str, out: ParsedDelta, closed: bool) -> None:
        try:
            calls = self._format.parse(body, self._schemas)
        except ValueError:
            raw = self._marker + body + (self._format.end if closed and self._format.end else "")
            self._space = self._call_space + self._space
            self._text(raw, out)
            return
        for call in calls:
            if self._max_calls is None or self.tool_calls < self._max_calls:
                out.tool_calls.append(call)
                self.tool_calls += 1
        self._space = ""


class ToolChoiceParser:
    """The output of a request whose tool_choice forces a call: the grammar makes it one JSON
    object ``{"name": ..., "arguments": {...}}``, turned into one tool call at the end (given
    back as text if it is not one, as when max_tokens cut it short)."""

    def __init__(self):
        self._buf = ""
        self.tool_calls = 0

    def feed(self, text: str) -> ParsedDelta:
        self._buf += text
        return ParsedDelta()

    def finish(self) -> ParsedDelta:
        try:
            value = json.loads(self._buf)
            if not isinstance(value, dict) or set(value) - {"name", "arguments"}:
                raise ValueError("not a call")
            call = new_tool_call(value.get("name"), value.get("arguments", {}))
        except ValueError:
            return ParsedDelta(text=self._buf)
        self.tool_calls = 1
        return ParsedDelta(tool_calls=[call])
