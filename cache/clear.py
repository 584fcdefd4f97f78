"""Clearing one model's KV blocks from both tiers (the admin console's Clear buttons).

The hot tier belongs to the engine thread, so the caller passes ``on_engine``: a function that
runs ``fn(block_cache)`` there (Engine.call) for a loaded model. Order: first the hot tier drops
every block no request holds (without writing it down) and waits for the cold tier's queued
writes; then the cold tier's files and rows go (cache/cold_usage.py), and this process's live
cold tier forgets them. A block a running request still holds stays in RAM until it ends; a
block stored meanwhile is kept (it is new). The next request with the same prompt computes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import cold_usage
from .block_file import FINGERPRINT_DIR

OnEngine = Callable[[Callable[[object], object]], object]


@dataclass
class Cleared:
    hot_blocks: int = 0
    hot_bytes: int = 0
    cold_files: int = 0
    cold_bytes: int = 0
    rows: int = 0

    def add(self, other: "Cleared") -> "Cleared":
        for name in ("hot_blocks", "hot_bytes", "cold_files", "cold_bytes", "rows"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def clear_model(root, fingerprint: str, on_engine: Optional[OnEngine] = None) -> Cleared:
    """Remove a model's blocks: its hot tier (when loaded: ``on_engine``) and its cold-tier
    directory under ``root`` (None: the cold tier is off). ValueError for a bad fingerprint."""
    if not FINGERPRINT_DIR.match(fingerprint or ""):
        raise ValueError(f"{fingerprint!r} is not a model fingerprint")
    out = Cleared()
    if on_engine is not None:
        dropped = on_engine(_clear_hot)
        if dropped:
            out.hot_blocks, out.hot_bytes = dropped
    if root is not None:
        result = cold_usage.clear(root, [fingerprint])
        out.cold_files, out.cold_bytes, out.rows = result.files, result.bytes, result.rows
    return out


def _clear_hot(cache) -> Optional[tuple]:
    clear_hot = getattr(cache, "clear_hot", None)  # None: prefix caching is off for the model
    return clear_hot() if clear_hot is not None else None
