"""The drafters by name: the values of the ``speculative`` setting."""

from __future__ import annotations

from typing import Optional

from .answers import AnswerStore
from .drafter import METHODS, Drafter
from .prompt_lookup import PromptLookupDrafter
from .suffix import SuffixDrafter


def make_drafter(method: str, answers: Optional[AnswerStore] = None, salt: Optional[str] = None) -> Drafter:
    """A fresh drafter for ``method`` (one of METHODS but "off"). ``answers``: the served
    model's earlier answers (for "suffix"; None: none), ``salt``: the request's cache salt."""
    if method == "lookup":
        return PromptLookupDrafter()
    if method == "suffix":
        return SuffixDrafter(answers if answers is not None else AnswerStore(), salt)
    raise ValueError(f"speculative={method!r}: must be one of {', '.join(METHODS)}")
