"""The drafters by name: the values of the ``speculative`` setting."""

from __future__ import annotations

from .drafter import METHODS, Drafter
from .prompt_lookup import PromptLookupDrafter


def make_drafter(method: str, draft=None) -> Drafter:
    """A fresh drafter for ``method`` (one of METHODS but "off"); ``draft``: the engine's
    ``draft_model.DraftModel`` (for "draft")."""
    if method == "lookup":
        return PromptLookupDrafter()
    if method == "draft" and draft is not None:
        return draft.drafter()
    raise ValueError(f"speculative={method!r}: must be one of {', '.join(METHODS)}")
