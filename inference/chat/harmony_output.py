"""Splitting a gpt-oss (Harmony) output into answer text, reasoning and tool calls, as it streams.

``HarmonyParser`` has ``OutputParser``'s interface (``feed``, ``finish``, ``tool_calls``). The
output is a sequence of messages (``inference.chat.tool_parsers.harmony``); per message:

- channel ``analysis``: its content is reasoning;
- a recipient ``to=functions.NAME`` (any channel): its content is the call's JSON arguments,
  held until the message ends, then one tool call (given back as text, header included, when
  the arguments are not a JSON object or tools are not parsed);
- otherwise (``final``, a ``commentary`` preamble): its content is answer text;
- a message of another role than the assistant (a tool result the model wrote itself, when
  ``<|call|>`` did not stop generation) is dropped.

Headers and end markers never reach the text: a header is held until ``<|message|>`` comes,
and content that could be the start of a marker is held until the next delta settles it. Output
that does not open with a header (the model ignored the format) is answer text. A header cut
short by the end of the output is dropped.
"""

from __future__ import annotations

from typing import Optional

from .output import ParsedDelta, _held_back
from .tool_parsers.base import Schemas
from .tool_parsers.harmony import CHANNEL, ENDS, MESSAGE, START, HarmonyFormat, read_header

_OPENERS = (START, CHANNEL)
_CLOSERS = ENDS + _OPENERS  # a message also ends where the next one starts


class HarmonyParser:
    def __init__(
        self, parse_tools: bool = True, max_calls: Optional[int] = None, schemas: Optional[Schemas] = None
    ):
        self._parse_tools = parse_tools
        self._max_calls = max_calls
        self._schemas = schemas
        self._format = HarmonyFormat()
        self._state = "between"  # between | header | content
        self._kind = "text"  # of the current message's content: text | reasoning | call
        self._header = ""
        self._buf = ""
        self.tool_calls = 0

    def feed(self, text: str) -> ParsedDelta:
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> ParsedDelta:
        out = self._drain(final=True)
        if self._state == "content":
            self._end_message(self._buf, out)
        self._buf, self._state = "", "between"
        return out

    def _drain(self, final: bool) -> ParsedDelta:
        out = ParsedDelta()
        while self._buf:
            if self._state == "between":
                stripped = self._buf.lstrip()
                if stripped.startswith(_OPENERS):
                    self._buf, self._state = stripped, "header"
                elif final and not stripped:
                    self._buf = ""  # whitespace between messages is not text
                elif not final and (not stripped or any(o.startswith(stripped) for o in _OPENERS)):
                    return out  # only whitespace, or the start of a header: wait
                else:
                    self._state, self._kind, self._header = "content", "text", ""
            elif self._state == "header":
                i = self._buf.find(MESSAGE)
                if i < 0:
                    if final:
                        self._buf = ""  # a header without content: nothing to say
                    return out
                self._header, self._buf = self._buf[:i], self._buf[i + len(MESSAGE) :]
                header = read_header(self._header)
                self._kind = (
                    "drop"
                    if header.role != "assistant"
                    else "call"
                    if header.recipient
                    else "reasoning"
                    if header.channel == "analysis"
                    else "text"
                )
                self._state = "content"
            else:
                hits = [(self._buf.find(m), m) for m in _CLOSERS]
                hits = [(i, m) for i, m in hits if i >= 0]
                if not hits:
                    if self._kind != "call":
                        keep = 0 if final else _held_back(self._buf, _CLOSERS)
                        self._emit(self._buf[: len(self._buf) - keep], out)
                        self._buf = self._buf[len(self._buf) - keep :]
                    return out
                i, marker = min(hits)
                content = self._buf[:i]
                self._buf = self._buf[i + (len(marker) if marker in ENDS else 0) :]
                self._end_message(content, out)
                self._state = "between"
        return out

    def _emit(self, text: str, out: ParsedDelta) -> None:
        if self._kind == "drop":
            return
        if self._kind == "reasoning":
            out.reasoning += text
        else:
            out.text += text

    def _end_message(self, content: str, out: ParsedDelta) -> None:
        """The rest of the current message's content, which ends here."""
        if self._kind != "call":
            self._emit(content, out)
            return
        try:
            if not self._parse_tools:
                raise ValueError("tools are not parsed")
            calls = self._format.parse(self._header + MESSAGE + content, self._schemas)
        except ValueError:
            out.text += self._header + MESSAGE + content
            return
        for call in calls:
            if self._max_calls is None or self.tool_calls < self._max_calls:
                out.tool_calls.append(call)
                self.tool_calls += 1
