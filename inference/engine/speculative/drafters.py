"""The drafters by name: the values of the ``speculative`` setting."""

from __future__ import annotations

from typing import Optional

from .answers import AnswerStore
from .drafter import METHODS, Drafter
from .prompt_lookup import PromptLookupDrafter
from .suffix import SuffixDrafter


def make_drafter(
    method: str, draft=None, answers: Optional[AnswerStore] = None, salt: Optional[str] = None
) -> Drafter:
    """A fresh drafter for ``method`` (one of METHODS but "off"). ``draft``: the engine's
    ``draft_model.DraftModel`` (for "draft"); ``answers``: the served model's earlier answers
    (for "suffix"; None: none), ``salt``: the request's cache salt."""
    if method == "lookup":
        return PromptLookupDrafter()
    if method == "suffix":
        return SuffixDrafter(answers if answers is not None else AnswerStore(), salt)
    if method == "draft" and draft is not None:
        return draft.drafter()
    raise ValueError(f"speculative={method!r}: must be one of {', '.join(METHODS)}")
