"""What a block holds for each layer of a model: the cache layout.

mlx-lm models mix layer caches. omlx splits three kinds into blocks:

    full     full attention (mlx-lm ``KVCache``): the block keeps the keys and values of every one
             of its tokens, shaped [1, kv_heads, n, head_dim].
    sliding  sliding-window attention (``RotatingKVCache``, window W): the block keeps the keys
             and values of its last min(n, W) tokens. A sequence of L tokens needs only its last W
             for such a layer, and those always lie in the tails of its last blocks.
    state    recurrent state (``ArraysCache``: Gated DeltaNet, Mamba conv and SSM state): the block
             keeps the state at its end boundary, a few arrays of fixed shape [1, ...]. The state
             depends on the whole prefix, so it exists only where a computation stopped.

A block's payload is one tuple of arrays per layer: (keys, values) for attention layers, the state
arrays for recurrent ones. A model run with quantized KV (``CacheLayout.kv``, e.g. ``q8g64``: 8
bits, groups of 64 channels) keeps its attention layers, full and sliding, as six arrays, (keys,
key scales, key biases, values, value scales, value biases): the packed uint32 data and the
float scales and biases of ``mx.quantize``, each with the tokens on axis 2; its state layers
stay in their dtype. Nothing here imports mlx: the block files' checks use it too.

Where a prefix hit may end (the rule every kind must agree on, stated once in ``hit_can_end``):
at the end of any cached block; inside a block only when no layer is recurrent (a state exists
only at block ends) and every sliding layer kept all of the block's tokens (window >= block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

FULL, SLIDING, STATE = "full", "sliding", "state"


@dataclass(frozen=True)
class LayerSpec:
    """One layer's cache: its kind, and for a sliding layer its window, for a state layer the
    number of arrays and their shapes without the batch axis."""

    kind: str
    window: int = 0
    shapes: Tuple[Tuple[int, ...], ...] = ()

    @property
    def tag(self) -> str:
        """Compact form for block file metadata: ``f``, ``s<window>``, ``r<arrays>``."""
        if self.kind == FULL:
            return "f"
        if self.kind == SLIDING:
            return f"s{self.window}"
        return f"r{len(self.shapes)}"

    def stored_tokens(self, n: int) -> int:
        """Tokens of an n-token block whose KV this layer keeps (0 for a state layer)."""
        if self.kind == FULL:
            return n
        if self.kind == SLIDING:
            return min(n, self.window)
        return 0


@dataclass(frozen=True)
class CacheLayout:
    """The per-layer cache kinds of a model, in the order of its (flattened) layer caches.

    ``descriptor`` goes into the model fingerprint, so a model whose layout differs in any way
    (a kind, a window, a state shape, head counts) never shares blocks with this one. A model
    with full attention on every layer keeps the descriptor of the first cache format
    (``kv:LAYERSxHEADSxK_DIMxV_DIM``), so its SSD blocks written before stay valid.
    """

    layers: Tuple[LayerSpec, ...]
    descriptor: str
    kv: str = ""  # the attention layers' KV format: "" (the model's dtype) or q<bits>g<group>

    @property
    def plain(self) -> bool:
        return all(spec.kind == FULL for spec in self.layers)

    @property
    def has_state(self) -> bool:
        return any(spec.kind == STATE for spec in self.layers)

    @property
    def tags(self) -> str:
        """Per-layer tags joined by commas (block file metadata); empty for a plain layout."""
        return "" if self.plain else ",".join(spec.tag for spec in self.layers)

    def hit_can_end(self, block_tokens: int, used: int) -> bool:
        """Whether a prefix hit may end after ``used`` of the ``block_tokens`` tokens of a block
        (see the module docstring)."""
        if used == block_tokens:
            return True
        return not self.has_state and all(
            spec.window >= block_tokens for spec in self.layers if spec.kind == SLIDING
        )


def plain_layout(num_layers: int, kv_heads: int, k_dim: int, v_dim: int) -> CacheLayout:
    return CacheLayout((LayerSpec(FULL),) * num_layers, f"kv:{num_layers}x{kv_heads}x{k_dim}x{v_dim}")


def mixed_layout(specs: Sequence[Tuple[LayerSpec, str]]) -> CacheLayout:
    """A layout from (spec, shape text) per layer; the shape text (heads and dims of attention
    layers, dtypes and shapes of states) goes into the descriptor with the spec's tag."""
    parts = [f"{spec.tag}:{shape}" for spec, shape in specs]
    return CacheLayout(tuple(spec for spec, _ in specs), "mixed:" + ";".join(parts))


def quantized(layout: CacheLayout, kv: str) -> CacheLayout:
    """``layout`` with its attention layers' KV in format ``kv`` (``q<bits>g<group>``): the
    format goes into the descriptor, so float and quantized blocks never share a key."""
    if parse_kv(kv) is None:
        raise ValueError(f"bad KV format {kv!r}")
    return CacheLayout(layout.layers, f"{layout.descriptor}|{kv_descriptor(layout, kv)}", kv)


def kv_descriptor(layout: CacheLayout, kv: str) -> str:
    """The KV format's part of a fingerprint's descriptor: ``kv``, with ``+sliding`` where sliding
    layers are quantized too (their blocks were float before: the two never share a key)."""
    return kv + ("+sliding" if any(spec.kind == SLIDING for spec in layout.layers) else "")


def parse_kv(text: str) -> Optional[Tuple[int, int]]:
    """(bits, group size) of a KV format ``q<bits>g<group>``; None if malformed."""
    bits, sep, group = text[1:].partition("g")
    if text[:1] != "q" or not sep or not bits.isdigit() or not group.isdigit():
        return None
    if int(bits) not in (2, 3, 4, 5, 6, 8) or int(group) not in (32, 64, 128):
        return None
    return int(bits), int(group)


def parse_tags(text: str) -> Optional[Tuple[Tuple[str, int], ...]]:
    """(kind, window or array count) per layer from ``CacheLayout.tags``; None if malformed."""
    out = []
    for tag in text.split(","):
        kind = {"f": FULL, "s": SLIDING, "r": STATE}.get(tag[:1])
        if kind is None:
            return None
        if kind == FULL:
            if tag != "f":
                return None
            out.append((kind, 0))
            continue
        if not tag[1:].isdigit() or int(tag[1:]) < 1:
            return None
        out.append((kind, int(tag[1:])))
    return tuple(out)
