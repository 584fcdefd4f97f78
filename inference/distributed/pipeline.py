"""Splitting a loaded mlx-lm model's decoder layers across the ranks of a distributed group.

The model keeps its own forward pass (embedding, masks, layers, norm, head); only its layer list
is cut to this rank's slice, and the first and last layers of the slice get a stage role by
changing their class to a subclass (``_Stage``) that keeps every parameter name and attribute:

- the first layer (ranks > 0) replaces its input by the hidden state received from rank - 1;
- the last layer sends its output to rank + 1 (ranks but the last), then every rank gathers the
  outputs of all ranks and keeps the last rank's: the model's final hidden state, the same on
  every rank, from which each rank computes the logits itself.

The pass is evaluated up to the gather inside the call: every rank then runs its sends,
receives and gathers in call order (lazily, one graph holding several passes could be evaluated
in a different order on each rank, and the ranks would wait for each other forever). This costs
the overlap of a decode step with the host's work on the last one.

Families: those whose layers all use plain full-attention caches (mlx-lm ``KVCache``) and whose
forward pass iterates ``model.model.layers`` with one cache per layer (llama, mistral, qwen2,
qwen3 and the like). A model with sliding-window or recurrent layers is refused: its masks or
caches are indexed by absolute layer number, which a slice does not keep.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, make_prompt_cache

from .layer_split import LayerSplit, even_split
from .plan_channel import collective


class _Stage:
    """Mixed into the class of a stage's first or last layer (see the module docstring)."""

    def __call__(self, x, *args, **kwargs):
        stage = self._stage
        if self._stage_receives:
            x = mx.distributed.recv_like(x, stage.rank - 1, group=self._stage_group)
        out = super().__call__(x, *args, **kwargs)
        if not self._stage_sends:
            return out
        if not stage.last:
            out = mx.distributed.send(out, stage.rank + 1, group=self._stage_group)
        rows = out.shape[0]
        gathered = mx.distributed.all_gather(out, group=self._stage_group)
        final = gathered[(stage.size - 1) * rows : stage.size * rows]
        # Now, not when the caller evaluates: collectives must run in the same order on every
        # rank, and one lazy graph holding several passes may be evaluated in another order.
        collective(final)
        cache = kwargs.get("cache", args[1] if len(args) > 1 else None)
        if cache is not None and getattr(cache, "keys", None) is not None:
            cache.keys = mx.depends(cache.keys, final)
        return final


def splittable_reason(model: nn.Module) -> Optional[str]:
    """Why ``model`` cannot be split by layers here, or None when it can."""
    inner = getattr(model, "model", None)
    if not isinstance(getattr(inner, "layers", None), list) or not inner.layers:
        return "its decoder layers are not a list at model.model.layers"
    kinds = {type(c).__name__ for c in make_prompt_cache(model)}
    if kinds != {KVCache.__name__}:
        return f"a pipeline split needs full attention in every layer; it has {', '.join(sorted(kinds))}"
    return None


def split_model(model: nn.Module, group: mx.distributed.Group) -> LayerSplit:
    """Keep this rank's slice of ``model.model.layers`` (the others are dropped before their
    weights are read when the model was loaded lazily) and give its ends their stage roles.
    ValueError when the model cannot be split."""
    reason = splittable_reason(model)
    if reason is not None:
        raise ValueError(f"cannot split {getattr(model, 'model_type', 'the model')}: {reason}")
    inner = model.model
    split = even_split(len(inner.layers), group.size(), group.rank())
    own = inner.layers[split.start : split.end]
    _make_stage(own[0], split, group, receives=not split.first)
    _make_stage(own[-1], split, group, sends=True)  # the same layer as own[0] in a one-layer slice
    inner.layers = own
    return split


def _make_stage(layer: nn.Module, split: LayerSplit, group, receives=False, sends=False) -> None:
    if not isinstance(layer, _Stage):
        layer.__class__ = type(f"Stage{type(layer).__name__}", (_Stage, type(layer)), {})
        layer._stage_receives = layer._stage_sends = False
    layer._stage, layer._stage_group = split, group
    layer._stage_receives = layer._stage_receives or receives
    layer._stage_sends = layer._stage_sends or sends
