"""The drafters by name: the values of the ``speculative`` setting."""

from __future__ import annotations

from .drafter import METHODS, Drafter
from .prompt_lookup import PromptLookupDrafter


def make_drafter(method: str) -> Drafter:
    """A fresh drafter for ``method`` (one of METHODS but "off")."""
    if method == "lookup":
        return PromptLookupDrafter()
    raise ValueError(f"speculative={method!r}: must be one of {', '.join(METHODS)}")
