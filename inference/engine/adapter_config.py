"""What a LoRA adapter folder says about itself, read without MLX (discovery reads it too).

Two formats:

- ``mlx_lm.lora``'s: ``adapter_config.json`` with ``lora_parameters`` (``rank``, ``scale``)
  and ``fine_tune_type`` "lora", weights in ``adapters.safetensors`` named after the model's
  own parameters (``model.layers.0.self_attn.q_proj.lora_a`` [in, r], ``lora_b`` [r, out]);
  its base is the ``model`` key (the path or repo ``mlx_lm.lora --model`` was given).
- PEFT's: ``adapter_config.json`` with ``peft_type`` "LORA", ``r``, ``lora_alpha`` (scale
  ``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``), weights in
  ``adapter_model.safetensors`` named ``base_model.model.<module>.lora_A.weight`` [r, in] and
  ``lora_B.weight`` [out, r]; its base is ``base_model_name_or_path``.

Anything that changes the math in a way the per-row LoRA layer (``inference.engine.lora``)
does not compute (DoRA, full fine-tunes, per-module ranks or alphas, trained biases, extra
saved modules) is refused with the reason, never served approximately.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

CONFIG_FILE = "adapter_config.json"
MLX_WEIGHTS = "adapters.safetensors"
PEFT_WEIGHTS = "adapter_model.safetensors"


class AdapterError(ValueError):
    """An adapter folder omlx cannot serve; the message says why."""


@dataclass(frozen=True)
class AdapterConfig:
    """One adapter folder as its config describes it."""

    path: Path
    format: str  # "mlx" (mlx_lm.lora) or "peft"
    base: Optional[str]  # the base model's path or name as the adapter recorded it
    scale: float  # multiplies (x A) B: lora_parameters.scale, or PEFT's lora_alpha / r
    weights_file: Path


def is_adapter_folder(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and not (path / "config.json").exists()


def read_adapter_config(path: Path) -> AdapterConfig:
    """The adapter in ``path``; AdapterError when it cannot be served."""
    path = Path(path)
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{CONFIG_FILE} cannot be read: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{CONFIG_FILE} is not a JSON object")
    if "peft_type" in config:
        return _peft(path, config)
    if "lora_parameters" in config or "fine_tune_type" in config:
        return _mlx(path, config)
    raise AdapterError(f"{CONFIG_FILE} is neither mlx_lm.lora's (lora_parameters) nor PEFT's (peft_type)")


def _mlx(path: Path, config: dict) -> AdapterConfig:
    kind = config.get("fine_tune_type", "lora")
    if kind != "lora":
        raise AdapterError(f"fine_tune_type {kind!r}: omlx serves LoRA adapters only (not DoRA or full)")
    params = config.get("lora_parameters")
    if not isinstance(params, dict) or not _number(params.get("scale")):
        raise AdapterError("lora_parameters has no numeric 'scale'")
    weights = path / MLX_WEIGHTS
    if not weights.is_file():
        raise AdapterError(f"no {MLX_WEIGHTS} in the folder")
    base = config.get("model")
    return AdapterConfig(
        path, "mlx", base if isinstance(base, str) else None, float(params["scale"]), weights
    )


def _peft(path: Path, config: dict) -> AdapterConfig:
    if config.get("peft_type") != "LORA":
        raise AdapterError(f"peft_type {config.get('peft_type')!r}: omlx serves LORA adapters only")
    refused = [
        ("use_dora", "DoRA"),
        ("rank_pattern", "per-module ranks (rank_pattern)"),
        ("alpha_pattern", "per-module alphas (alpha_pattern)"),
        ("modules_to_save", "extra saved modules (modules_to_save)"),
        ("fan_in_fan_out", "fan_in_fan_out weights"),
        ("layer_replication", "layer_replication"),
    ]
    for key, what in refused:
        if config.get(key):
            raise AdapterError(f"the adapter uses {what}, which omlx does not serve")
    if config.get("bias", "none") != "none":
        raise AdapterError(
            f"the adapter trains biases (bias={config.get('bias')!r}), which omlx does not serve"
        )
    r, alpha = config.get("r"), config.get("lora_alpha")
    if not (_number(r) and r > 0 and _number(alpha)):
        raise AdapterError("adapter_config.json needs a positive 'r' and a numeric 'lora_alpha'")
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    weights = path / PEFT_WEIGHTS
    if not weights.is_file():
        raise AdapterError(f"no {PEFT_WEIGHTS} in the folder (PEFT's .bin weights: convert to safetensors)")
    base = config.get("base_model_name_or_path")
    return AdapterConfig(path, "peft", base if isinstance(base, str) else None, float(scale), weights)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
