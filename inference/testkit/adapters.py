"""Random LoRA adapters of a test model, written as ``mlx_lm.lora`` or PEFT writes them
(inference.engine.adapter_config describes both formats). B is not zero (a freshly initialised
adapter's is), so every adapter changes the model's outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

TARGETS = ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj")


def build_adapter(
    path,
    base_path,
    seed: int,
    rank: int = 4,
    scale: float = 2.0,
    fmt: str = "mlx",
    targets: Sequence[str] = TARGETS,
    num_layers: int = -1,
) -> Path:
    """Write an adapter of the model folder ``base_path`` into ``path`` (created); ``fmt`` is
    "mlx" (mlx_lm.lora's files) or "peft" (``lora_alpha = scale * rank``). ``num_layers``: the
    last n decoder blocks are adapted (-1: all), as mlx_lm.lora's ``--num-layers``."""
    from mlx_lm.utils import load_model

    path, base_path = Path(path), Path(base_path)
    path.mkdir(parents=True, exist_ok=True)
    model, _ = load_model(base_path)
    rng = np.random.default_rng(seed)
    layers = model.layers
    first = 0 if num_layers < 0 else len(layers) - num_layers
    modules = dict(model.named_modules())
    weights = {}
    for i in range(first, len(layers)):
        for target in targets:
            name = f"model.layers.{i}.{target}"
            layer = modules[name]
            assert isinstance(layer, (nn.Linear, nn.QuantizedLinear)), f"{name}: not a Linear layer"
            out_dims, in_dims = layer.weight.shape
            if isinstance(layer, nn.QuantizedLinear):  # packed: 32 / bits values per uint32
                in_dims = in_dims * 32 // layer.bits
            a = rng.uniform(-1, 1, (in_dims, rank)).astype(np.float32) / np.sqrt(in_dims)
            b = rng.normal(0, 0.2, (rank, out_dims)).astype(np.float32)
            if fmt == "mlx":
                weights[f"{name}.lora_a"], weights[f"{name}.lora_b"] = a, b
            else:
                weights[f"base_model.model.{name}.lora_A.weight"] = np.ascontiguousarray(a.T)
                weights[f"base_model.model.{name}.lora_B.weight"] = np.ascontiguousarray(b.T)
    arrays = {k: mx.array(v) for k, v in weights.items()}
    if fmt == "mlx":
        config = {
            "model": str(base_path),
            "fine_tune_type": "lora",
            "num_layers": num_layers if num_layers >= 0 else len(layers),
            "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": list(targets)},
        }
        mx.save_safetensors(str(path / "adapters.safetensors"), arrays)
    elif fmt == "peft":
        config = {
            "peft_type": "LORA",
            "base_model_name_or_path": str(base_path),
            "r": rank,
            "lora_alpha": scale * rank,
            "target_modules": sorted({t.rsplit(".", 1)[-1] for t in targets}),
            "lora_dropout": 0.0,
            "bias": "none",
            "task_type": "CAUSAL_LM",
        }
        mx.save_safetensors(str(path / "adapter_model.safetensors"), arrays)
    else:
        raise ValueError(f"fmt must be 'mlx' or 'peft', not {fmt!r}")
    (path / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return path


def as_mlx_adapter(peft_path, path) -> Path:
    """The PEFT adapter in ``peft_path`` rewritten in mlx_lm.lora's format (same math): what
    mlx-lm's own loader can load, to compare a PEFT adapter served by omlx against."""
    peft_path, path = Path(peft_path), Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = json.loads((peft_path / "adapter_config.json").read_text())
    weights = mx.load(str(peft_path / "adapter_model.safetensors"))
    out, keys = {}, set()
    for key, value in weights.items():
        name = key[len("base_model.model.") :]
        module, _, leaf = name.rpartition(".lora_")
        out[f"{module}.lora_{leaf[0].lower()}"] = value.T
        keys.add(".".join(module.split(".")[3:]))
    layers = {int(k.split(".")[2]) for k in out}
    rank = config["r"]
    mx.save_safetensors(str(path / "adapters.safetensors"), out)
    mlx_config = {
        "model": config["base_model_name_or_path"],
        "fine_tune_type": "lora",
        "num_layers": max(layers) + 1,
        "lora_parameters": {
            "rank": rank,
            "scale": config["lora_alpha"] / rank,
            "dropout": 0.0,
            "keys": sorted(keys),
        },
    }
    (path / "adapter_config.json").write_text(json.dumps(mlx_config, indent=2))
    return path
