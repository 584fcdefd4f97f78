"""What a model writes in its chat output: the tool-call format and the reasoning markers
(``inference.chat.tool_parsers.select`` states the rule). What the model's files show is found
once per tokenizer (reading a large vocabulary is not free); the ``tool_parser`` setting is
applied on top per request, so a change applies to the next request."""

from __future__ import annotations

import functools
import json
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from .reasoning import REASONING_TOKENS, Markers, detect_reasoning
from .tool_parsers import FORMATS, ToolFormat, detect_tool_format

_STOPS = tuple(dict.fromkeys(m for f in FORMATS.values() for m in f.stops))  # every format's
TOOL_PARSER_CHOICES = ("none", *FORMATS)  # values of the tool_parser setting (null: detect)


@dataclass(frozen=True)
class ChatCapabilities:
    tool_format: Optional[ToolFormat]
    reasoning: Optional[Markers]
    stop_token_ids: Tuple[int, ...] = ()  # ids of the format's ``stops`` (they end the model's turn)


_found: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def template_text(template) -> str:
    """A chat template as text to look for markers in; named templates ({name: text} or
    [{"name", "template"}], as for tool use) are all searched."""
    if isinstance(template, str):
        return template
    if isinstance(template, dict):
        return "\n".join(t for t in template.values() if isinstance(t, str))
    if isinstance(template, list):
        return "\n".join(
            t["template"] for t in template if isinstance(t, dict) and isinstance(t.get("template"), str)
        )
    return ""


def check_tool_parser(value) -> Optional[str]:
    """A ``tool_parser`` setting as given, or ValueError."""
    if value is None or value in TOOL_PARSER_CHOICES:
        return value
    raise ValueError(f"tool_parser: must be one of {', '.join(TOOL_PARSER_CHOICES)}, or null to detect it")


def decide(tool_format: Optional[ToolFormat], vocab, template: Optional[str]) -> ChatCapabilities:
    """The reasoning markers and stop tokens that go with ``tool_format`` (Harmony reads its own
    reasoning). Stop tokens are the format's ``stops`` that are single tokens of the vocabulary."""
    stops = tuple(vocab[m] for m in tool_format.stops if m in vocab) if tool_format is not None else ()
    if tool_format is not None and tool_format.name == "harmony":
        return ChatCapabilities(tool_format, None, stops)
    return ChatCapabilities(
        tool_format, detect_reasoning(vocab, template, tool_format and tool_format.reasoning), stops
    )


def capabilities(
    tokenizer, model_type: Optional[str] = None, tool_parser: Optional[str] = None
) -> ChatCapabilities:
    with _lock:
        found = _found.get(tokenizer)
    template = template_text(getattr(tokenizer, "chat_template", None))
    if found is None:
        vocab = tokenizer.get_vocab()
        markers = {m: vocab[m] for m in REASONING_TOKENS + _STOPS if m in vocab}  # all an override needs
        found = (markers, decide(detect_tool_format(template, vocab, model_type), vocab, template))
        with _lock:
            _found[tokenizer] = found
    vocab, detected = found
    if tool_parser is None:
        return detected
    return decide(None if tool_parser == "none" else FORMATS[tool_parser], vocab, template)


def folder_tool_format(path: Path, model_type: Optional[str]) -> Optional[str]:
    """The format detected from a model folder's files, without loading it (for the console):
    its chat template (tokenizer_config.json, chat_template.jinja) and added tokens stand in
    for the vocabulary. Read once per version of the files."""
    stamps = []
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        try:
            stamps.append((path / name).stat().st_mtime_ns)
        except OSError:
            stamps.append(None)
    return _folder_tool_format(str(path), model_type, tuple(stamps))


@functools.lru_cache(maxsize=256)
def _folder_tool_format(path: str, model_type: Optional[str], stamps) -> Optional[str]:
    template, tokens = [], set()
    try:
        config = json.loads((Path(path) / "tokenizer_config.json").read_text())
        template.append(template_text(config.get("chat_template")))
        tokens = {
            t.get("content")
            for t in (config.get("added_tokens_decoder") or {}).values()
            if isinstance(t, dict)
        }
    except (OSError, ValueError, AttributeError):
        pass
    try:
        template.append((Path(path) / "chat_template.jinja").read_text())
    except OSError:
        pass
    found = detect_tool_format("\n".join(template), tokens, model_type)
    return found.name if found is not None else None
