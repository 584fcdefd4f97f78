"""Tensor parallel: every rank holds every decoder layer, each with a shard of its weights.

The model's own ``shard(group)`` (mlx-lm's, for the families that provide one: llama, mistral,
qwen2, qwen3, qwen3_moe, qwen3_5, gpt_oss, deepseek_v2/v3, glm4_moe, minimax...) cuts each
attention's query, key and value projections by heads and each MLP's inner projections by
columns ("all-to-sharded"), and their output projections by rows ("sharded-to-all": a partial
sum on each rank, then an ``all_sum`` over the group). So every rank runs the same forward pass
over all the layers on the same rows, keeps the KV of its own heads (1/size of them), and gets
the same hidden state after every layer: every rank computes the same logits and samples the
same tokens, as in pipeline mode (``pipeline``). Rank 0 still decides every step and sends the
plan (``leader_runner``); what differs is only how the model is cut (``shard_model`` instead of
``pipeline.split_model``) and what a rank's block cache holds (``TensorShard.component``: its
heads of every layer).

Each pass is evaluated up to its last layer's output inside the call, as in pipeline mode: the
``all_sum`` collectives then run in call order on every rank, never interleaved with the plan
channel's or with another pass's in a different order on each rank.

The cost (docs/operations.md): every layer exchanges its hidden state twice per pass (after
attention and after the MLP), where pipeline mode sends it once per rank; in return each rank
computes a shard of every layer at once instead of waiting for the ranks before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

import mlx.core as mx
import mlx.nn as nn

from .hosts import PARALLEL_MODES as MODES
from .pipeline import split_model
from .plan_channel import collective
from .rank_cache import layers_component

PIPELINE, TENSOR = MODES

# Config fields that shard() divides by the group size (heads, MLP and expert widths).
_DIVIDED = (
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)


@dataclass(frozen=True)
class TensorShard:
    """Rank ``rank`` of ``size`` holds its shard of every one of ``num_layers`` layers."""

    rank: int
    size: int
    num_layers: int

    @property
    def component(self) -> str:
        """What the rank's block cache fingerprint adds to the model's: the shard it holds."""
        return f"|tensor:{self.rank}/{self.size}"


def shardable_reason(model: nn.Module, size: int) -> Optional[str]:
    """Why ``model`` cannot be sharded across ``size`` ranks, or None when it can."""
    name = getattr(model, "model_type", None) or type(model).__module__.rsplit(".", 1)[-1]
    if not callable(getattr(model, "shard", None)):
        return f"mlx-lm's {name} model has no tensor sharding (shard()); serve it with pipeline parallel"
    args = getattr(model, "args", None)
    for field in _DIVIDED:
        value = getattr(args, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value % size:
            return f"its {field} ({value}) does not divide across {size} ranks"
    return None


def shard_model(model: nn.Module, group: mx.distributed.Group) -> TensorShard:
    """Shard ``model`` across ``group`` with its own ``shard`` (before its weights are read when
    it was loaded lazily: each rank reads only its shard of them) and make its passes evaluate
    in call order (the module docstring). ValueError when the model cannot be sharded."""
    reason = shardable_reason(model, group.size())
    if reason is not None:
        raise ValueError(
            f"cannot shard {getattr(model, 'model_type', 'the model')} for tensor parallel: {reason}"
        )
    model.shard(group)
    layers = model.layers
    last = layers[-1]
    if not isinstance(last, _Synced):
        last.__class__ = type(f"Synced{type(last).__name__}", (_Synced, type(last)), {})
    return TensorShard(group.rank(), group.size(), len(layers))


class _Synced:
    """Mixed into the class of the last decoder layer: its output (and so every all_sum of the
    pass before it) is evaluated inside the call."""

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        collective(out)
        return out


def part_component(part) -> str:
    """What a rank's block cache fingerprint adds for ``part`` (a ``TensorShard`` or a
    pipeline ``LayerSplit``)."""
    if isinstance(part, TensorShard):
        return part.component
    return layers_component(part)


def sharder(parallel: str, group: mx.distributed.Group, parts: List) -> Callable[[nn.Module], None]:
    """``load_model``'s ``shard`` for ``parallel`` (one of ``MODES``): it cuts the model for this
    rank of ``group`` and appends what this rank holds (``TensorShard`` or ``LayerSplit``) to
    ``parts``. ValueError for an unknown mode."""
    if parallel not in MODES:
        raise ValueError(f"parallel must be one of {', '.join(MODES)}, not {parallel!r}")
    make = shard_model if parallel == TENSOR else split_model
    return lambda model: parts.append(make(model, group))
