"""Logits of one position per row, without the output head running over every position.

A prefill chunk needs the logits of one token per row only (its last real token: the request's
first token is sampled from them), but mlx-lm's models apply their output head to every
position, and that head (vocabulary x hidden) is a large part of a small model: 136 M of the
0.5 B parameters of a Qwen2.5-0.5B, so a 512-token chunk would spend a quarter of its work on
511 rows of logits nobody reads.

``HeadGate`` shadows the head of a loaded model (its ``lm_head`` module, or the tied
embedding's ``as_linear``) with a callable that, while positions are set, hands the head only
those positions: [B, L, D] -> [B, 1, D]. The module tree, the weights and the model's own code
stay as they are (the shadow is an instance attribute, found before the module's own entry;
``parameters()`` still sees the original). The gate checks itself at load on a probe input
against the model's full logits and stays off for a model where it does not reproduce them (a
head that is not where it looks, or work between the head and the output that is not per
position); the runner then slices the full logits, which is correct and slower.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

logger = logging.getLogger("omlx.engine")


class _Shadow:
    """Calls the original head on the gated positions; other attributes are the original's."""

    def __init__(self, gate: "HeadGate", original):
        self._gate = gate
        self._original = original

    def __call__(self, x, *args, **kwargs):
        positions = self._gate.positions
        if positions is not None and x.ndim == 3:
            x = x[mx.arange(x.shape[0]), positions][:, None, :]
        return self._original(x, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._original, name)


def _find_head(model: nn.Module):
    """(owner, attribute name) of the module or method that turns hidden states into logits."""
    language = model.get("language_model") if isinstance(model, dict) else None
    for owner in (model, language):
        if isinstance(owner, nn.Module) and isinstance(owner.get("lm_head"), nn.Module):
            return owner, "lm_head"
    for owner in (model, language):
        if not isinstance(owner, nn.Module):
            continue
        for inner_name in ("model", "backbone"):
            inner = owner.get(inner_name)
            if isinstance(inner, nn.Module):
                embed = inner.get("embed_tokens") or inner.get("embeddings")
                if isinstance(embed, nn.Module) and hasattr(embed, "as_linear"):
                    return embed, "as_linear"
    return None


class HeadGate:
    """See the module docstring. ``enabled`` is False when the gate could not be installed or
    failed its check; ``only(positions)`` is then a no-op and the caller slices full logits."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.positions: Optional[mx.array] = None
        self.enabled = False
        found = _find_head(model)
        if found is None:
            logger.info("no output head found on %s: prefill computes full logits", type(model).__module__)
            return
        owner, name = found
        original = getattr(owner, name)
        object.__setattr__(owner, name, _Shadow(self, original))
        try:
            self.enabled = self._check()
        except Exception:  # a model the gate does not fit: fall back to full logits
            logger.exception("output head gate check failed")
            self.enabled = False
        if not self.enabled:
            object.__delattr__(owner, name)  # the module's own entry is visible again
            logger.info("output head gate off for %s: prefill computes full logits", type(model).__module__)

    def _check(self) -> bool:
        tokens = mx.array([[1, 2, 3, 4], [5, 6, 7, 8]])
        full = self.model(tokens, cache=make_prompt_cache(self.model))
        self.positions = mx.array([3, 1])
        try:
            gated = self.model(tokens, cache=make_prompt_cache(self.model))
        finally:
            self.positions = None
        if gated.shape != (2, 1, full.shape[-1]):
            return False
        want = mx.stack([full[0, 3], full[1, 1]]).astype(mx.float32)
        got = gated[:, 0].astype(mx.float32)
        scale = mx.max(mx.abs(want)).item() or 1.0
        return mx.max(mx.abs(want - got)).item() <= 1e-3 * scale

    @contextmanager
    def only(self, positions: mx.array):
        """While inside, the head sees row i at ``positions[i]`` only (when enabled)."""
        self.positions = positions if self.enabled else None
        try:
            yield
        finally:
            self.positions = None

    def pick(self, logits: mx.array, positions: mx.array) -> mx.array:
        """[B, V]: the logits at ``positions`` of what a forward under ``only`` returned."""
        if self.enabled:
            return logits[:, 0, :]
        return logits[mx.arange(logits.shape[0]), positions]
