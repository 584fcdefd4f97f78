"""LoRA adapters over one shared base model, a different adapter per row of a batch.

``AdapterSet`` holds the adapters attached to an engine's model. The first one wraps each Linear
layer it targets in a ``MultiLoRALinear``; the base weights stay where they are, shared by every
adapter and by requests of the base itself. Each adapter gets a slot (1, 2, ...; 0 is the base).
Before every forward pass the runner says which slot each row uses (``AdapterSet.rows``, for
the decode batch and prefill passes alike), and every wrapped layer computes

    y = x W + scale_r * (x A_r) B_r        for row r's adapter; + 0 for a row of the base

by gathering the row's A and B (``mx.take`` along a stacked adapter axis; ranks differ, so the
stacks are zero-padded to the largest, which adds exact zeros). A pass whose rows all use the
base runs the base layer only. Adapters stay attached while the model is loaded; their weights
are parameters of the model, so the pool's measure of the loaded weights counts them.

Targets must be ``nn.Linear`` or ``nn.QuantizedLinear`` layers inside the decoder blocks
(``.layers.``); an adapter of the output head or the embeddings is refused (the head is shadowed
by ``HeadGate``, and mlx_lm.lora targets neither by default).
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import mlx.core as mx
import mlx.nn as nn

from .adapter_config import AdapterConfig, AdapterError


@dataclass(frozen=True)
class Adapter:
    """One attached adapter: its slot in the batch's per-row ids, the digest of its weights
    file (its identity in the block cache's keys), and the bytes of its weights."""

    name: str
    slot: int
    digest: str
    nbytes: int


class MultiLoRALinear(nn.Module):
    """A base Linear plus the LoRA pairs of several adapters, chosen per row (module docstring).

    ``local`` maps an adapter slot to this layer's own index (0: no adapter here, whose A and
    B are zeros), so a layer holds only the adapters that target it."""

    def __init__(self, linear: nn.Module, adapters: "AdapterSet"):
        super().__init__()
        self.linear = linear
        self._adapters = adapters  # a plain attribute: not a parameter, not a child module
        # slot -> (A, B, scale), outside the module tree (the stacks below are its parameters)
        object.__setattr__(self, "_pairs", {})
        self._rebuild()

    def add(self, slot: int, a: mx.array, b: mx.array, scale: float) -> None:
        self._pairs[slot] = (a, b, scale)
        self._rebuild()

    def _rebuild(self) -> None:
        slots = sorted(self._pairs)
        out_dims, in_dims = self.linear.weight.shape
        if isinstance(self.linear, nn.QuantizedLinear):
            in_dims = in_dims * 32 // self.linear.bits
        rank = max([a.shape[1] for a, _, _ in self._pairs.values()] + [1])
        a_stack = [mx.zeros((in_dims, rank), dtype=mx.float32)]
        b_stack = [mx.zeros((rank, out_dims), dtype=mx.float32)]
        scales = [0.0]
        for slot in slots:
            a, b, scale = self._pairs[slot]
            pad = rank - a.shape[1]
            a_stack.append(mx.pad(a, [(0, 0), (0, pad)]) if pad else a)
            b_stack.append(mx.pad(b, [(0, pad), (0, 0)]) if pad else b)
            scales.append(scale)
        local = [0] * (max(slots + [0]) + 1)
        for i, slot in enumerate(slots, start=1):
            local[slot] = i
        self.lora_a = mx.stack(a_stack)
        self.lora_b = mx.stack(b_stack)
        self.lora_scale = mx.array(scales, dtype=mx.float32)
        self.lora_local = mx.array(local, dtype=mx.int32)

    def __call__(self, x):
        y = self.linear(x)
        slots = self._adapters.current
        if slots is None:
            return y
        local = mx.take(self.lora_local, mx.minimum(slots, self.lora_local.shape[0] - 1))
        # A slot past this layer's table is an adapter attached later that does not target it.
        local = mx.where(slots < self.lora_local.shape[0], local, 0)
        a = mx.take(self.lora_a, local, axis=0)  # [B, in, r]
        b = mx.take(self.lora_b, local, axis=0)  # [B, r, out]
        scale = mx.take(self.lora_scale, local)[:, None, None]
        z = (x @ a) @ b
        return y + (scale * z).astype(x.dtype)


class AdapterSet:
    """The adapters attached to one model (module docstring). ``current``: the per-row slots
    of the pass being built (mx.array [B] int32), None while every row uses the base."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.current: Optional[mx.array] = None
        self.by_name: Dict[str, Adapter] = {}

    def __len__(self) -> int:
        return len(self.by_name)

    @contextmanager
    def rows(self, slots: Sequence[int]):
        """While inside, row i of a forward pass uses adapter slot ``slots[i]`` (0: the base)."""
        self.current = mx.array(list(slots), dtype=mx.int32) if any(slots) else None
        try:
            yield
        finally:
            self.current = None

    def attach(self, name: str, config: AdapterConfig) -> Adapter:
        """Read an adapter's weights and attach them under ``name`` (idempotent for a name);
        AdapterError when they do not fit the model."""
        if name in self.by_name:
            return self.by_name[name]
        digest = _digest(config)
        pairs = _pairs(config)
        modules = dict(self.model.named_modules())
        errors = []
        for target, (a, b) in pairs.items():
            layer = modules.get(target)
            if isinstance(layer, MultiLoRALinear):
                layer = layer.linear
            if ".layers." not in f".{target}":
                errors.append(f"{target}: only layers inside the decoder blocks can be adapted")
            elif not isinstance(layer, (nn.Linear, nn.QuantizedLinear)):
                errors.append(f"{target}: not a Linear layer of the base model")
            else:
                out_dims, in_dims = layer.weight.shape
                if isinstance(layer, nn.QuantizedLinear):
                    in_dims = in_dims * 32 // layer.bits
                if a.shape[0] != in_dims or b.shape[1] != out_dims or a.shape[1] != b.shape[0]:
                    errors.append(
                        f"{target}: A {tuple(a.shape)} and B {tuple(b.shape)} do not fit the layer "
                        f"({in_dims} -> {out_dims})"
                    )
        if errors:
            raise AdapterError("its weights do not fit the base model: " + "; ".join(errors[:5]))
        slot = len(self.by_name) + 1
        wrapped = []
        for target, (a, b) in pairs.items():
            layer = modules[target]
            if not isinstance(layer, MultiLoRALinear):
                layer = MultiLoRALinear(layer, self)
                wrapped.append((target, layer))
            layer.add(slot, a, b, config.scale)
        if wrapped:
            self.model.update_modules(_unflatten(wrapped))
        mx.eval(self.model.parameters())
        adapter = Adapter(name, slot, digest, sum(a.nbytes + b.nbytes for a, b in pairs.values()))
        self.by_name[name] = adapter
        return adapter


def _pairs(config: AdapterConfig) -> Dict[str, Tuple[mx.array, mx.array]]:
    """{module path in the mlx-lm model: (A [in, r], B [r, out])}, float32."""
    try:
        weights = mx.load(str(config.weights_file))
    except Exception as exc:
        raise AdapterError(f"{config.weights_file.name} cannot be read: {exc}") from None
    if config.format == "peft":
        prefix, a_name, b_name = "base_model.model.", ".lora_A.weight", ".lora_B.weight"
    else:
        prefix, a_name, b_name = "", ".lora_a", ".lora_b"
    pairs: Dict[str, List[Optional[mx.array]]] = {}
    for key, value in weights.items():
        if key.endswith(a_name) or key.endswith(b_name):
            target = key[: -len(a_name if key.endswith(a_name) else b_name)]
            if not target.startswith(prefix):
                raise AdapterError(f"{key}: not a LoRA weight of the base model")
            pair = pairs.setdefault(target[len(prefix) :], [None, None])
            pair[0 if key.endswith(a_name) else 1] = value.astype(mx.float32)
        else:
            raise AdapterError(f"{key}: not a LoRA A or B weight (omlx serves LoRA pairs only)")
    if not pairs:
        raise AdapterError(f"{config.weights_file.name} holds no LoRA weights")
    out = {}
    for target, (a, b) in pairs.items():
        if a is None or b is None or a.ndim != 2 or b.ndim != 2:
            raise AdapterError(f"{target}: needs one 2-D A and one 2-D B weight")
        out[target] = (a.T, b.T) if config.format == "peft" else (a, b)  # PEFT stores [r, in], [out, r]
    return out


def _digest(config: AdapterConfig) -> str:
    h = hashlib.sha256(b"omlx-adapter\0")
    h.update(f"{config.scale!r}\0".encode())
    with open(config.weights_file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _unflatten(items: List[Tuple[str, nn.Module]]) -> dict:
    from mlx.utils import tree_unflatten

    return tree_unflatten(items)
