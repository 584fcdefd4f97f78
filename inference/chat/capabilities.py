"""What a model writes in its chat output: the tool-call format and the reasoning markers
(``inference.chat.tool_parsers.select`` states the rule). What the model's files show is found
once per tokenizer (reading a large vocabulary is not free); the ``tool_parser`` setting is
applied on top per request, so a change applies to the next request."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Optional

from .reasoning import REASONING_TOKENS, Markers, detect_reasoning
from .tool_parsers import FORMATS, ToolFormat, detect_tool_format

TOOL_PARSER_CHOICES = ("none", *FORMATS)  # values of the tool_parser setting (null: detect)


@dataclass(frozen=True)
class ChatCapabilities:
    tool_format: Optional[ToolFormat]
    reasoning: Optional[Markers]


_found: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def check_tool_parser(value) -> Optional[str]:
    """A ``tool_parser`` setting as given, or ValueError."""
    if value is None or value in TOOL_PARSER_CHOICES:
        return value
    raise ValueError(f"tool_parser: must be one of {', '.join(TOOL_PARSER_CHOICES)}, or null to detect it")


def decide(tool_format: Optional[ToolFormat], vocab, template: Optional[str]) -> ChatCapabilities:
    """The reasoning markers that go with ``tool_format`` (Harmony reads its own)."""
    if tool_format is not None and tool_format.name == "harmony":
        return ChatCapabilities(tool_format, None)
    return ChatCapabilities(tool_format, detect_reasoning(vocab, template, tool_format and tool_format.reasoning))


def capabilities(tokenizer, model_type: Optional[str] = None, tool_parser: Optional[str] = None) -> ChatCapabilities:
    with _lock:
        found = _found.get(tokenizer)
    template = getattr(tokenizer, "chat_template", None)
    if found is None:
        vocab = tokenizer.get_vocab()
        markers = frozenset(m for m in REASONING_TOKENS if m in vocab)  # all a later override needs
        found = (markers, decide(detect_tool_format(template, vocab, model_type), vocab, template))
        with _lock:
            _found[tokenizer] = found
    vocab, detected = found
    if tool_parser is None:
        return detected
    return decide(None if tool_parser == "none" else FORMATS[tool_parser], vocab, template)
