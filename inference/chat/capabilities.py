"""What a model's tokenizer says about its chat output: the tool-call format and the reasoning
markers it writes (found once per tokenizer: reading a large vocabulary is not free)."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Optional

from .reasoning import Markers, detect_reasoning
from .tool_parsers import ToolFormat, detect_tool_format


@dataclass(frozen=True)
class ChatCapabilities:
    tool_format: Optional[ToolFormat]
    reasoning: Optional[Markers]


_found: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def capabilities(tokenizer) -> ChatCapabilities:
    with _lock:
        found = _found.get(tokenizer)
    if found is None:
        vocab = tokenizer.get_vocab()
        found = ChatCapabilities(detect_tool_format(getattr(tokenizer, "chat_template", None), vocab),
                                 detect_reasoning(vocab))
        with _lock:
            _found[tokenizer] = found
    return found
