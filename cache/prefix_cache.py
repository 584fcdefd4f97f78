"""The seam between the engine and the KV block cache.

The engine asks a PrefixCache for the longest cached prefix of a prompt before prefilling
it, and hands back what it computed. Caches cross this boundary as plain arrays, one tuple per
layer in the order of ``cache.layout.CacheLayout``: (keys, values) shaped [1, kv_heads, tokens,
head_dim] for attention layers, the state arrays for recurrent layers. So this app needs nothing
from the engine or from mlx-lm's cache classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

LayerKV = Tuple[Any, ...]


@dataclass
class KVSnapshot:
    """What the engine holds of one sequence's caches after computing ``token_ids[:end]``.

    ``layers[i]`` is, for an attention layer, ``(keys, values, start)``: the KV of tokens
    ``[start, end)`` (start 0 for full attention; a sliding window keeps only its last tokens;
    quantized KV has its six arrays before ``start``, cache/layout.py);
    for a recurrent layer, the tuple of its state arrays at ``end``; None where the engine did
    not take that layer (a snapshot taken for the recurrent and sliding layers only).
    """

    end: int
    layers: List[Any]


@dataclass
class PrefixHit:
    """The caches for ``token_ids[:num_tokens]`` of a looked-up prompt, verified token by token:
    per layer (keys, values) of full attention for all those tokens, of a sliding window for
    the last min(num_tokens, window) of them, or the recurrent state at ``num_tokens``."""

    num_tokens: int
    layers: List[LayerKV]
    hot_tokens: int = 0
    cold_tokens: int = 0
    handle: Any = None  # what the cache needs to release the hit


class PrefixCache:
    """Base class and the "caching off" behaviour: every lookup misses, stores are dropped.

    Subclasses (the block cache) override these methods. ``lookup`` must return KV only
    after comparing the cached token ids with the request's; ``max_tokens`` caps the hit
    (the engine always computes at least the last prompt token itself).

    ``salt`` is the request's cache salt (``cache.block_key.salted_root``): lookups, peeks and
    stores under one salt see only the blocks stored under that salt; None is the unsalted cache.
    """

    wants_kv = False  # whether store() does anything, so the engine can skip extracting KV

    def lookup(
        self, token_ids: Sequence[int], max_tokens: int, salt: Optional[str] = None
    ) -> Optional[PrefixHit]:
        return None

    def peek(self, token_ids: Sequence[int], max_tokens: int, salt: Optional[str] = None) -> int:
        """How many tokens ``lookup`` would serve now, without loading, holding or counting
        anything (the scheduler asks it to decide whether waiting for a prefill helps)."""
        return 0

    def store(
        self, token_ids: Sequence[int], snapshots: List[KVSnapshot], salt: Optional[str] = None
    ) -> None:
        """Caches of ``token_ids`` computed by the engine, as snapshots taken at one or more
        positions (each ``end`` <= len(token_ids)). Blocks are made for as much of the
        sequence as the snapshots can fill."""

    def release(self, hit: PrefixHit) -> None:
        """The engine no longer needs the blocks behind ``hit``."""

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """How fast the engine computed a prefill chunk (to weigh restoring against it)."""

    def engine_busy(self, busy: bool) -> None:
        """The engine starts (True) or ends (False) a step that computes prompt tokens: background
        disk writes wait for the end (up to a bounded delay), so they do not slow the prefill
        and the first token down."""

    def shrink_hot(self) -> int:
        """Memory pressure: let go of half of what the RAM tier holds; returns the bytes."""
        return 0

    def restore_hot(self) -> None:
        """Memory pressure is over: the RAM tier gets its configured budget back."""

    def snapshot(self) -> dict:
        """Counters for reporting; empty when caching is off."""
        return {}

    def close(self) -> None:
        """The engine is stopping: finish pending work (writes to disk)."""
