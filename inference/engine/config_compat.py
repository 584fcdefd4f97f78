"""A folder's config.json as the installed mlx-lm reads it: the one place that knows which keys
moved between transformers 4 and 5.

transformers 5 writes RoPE as ``rope_parameters`` (one dict, or one per layer type such as
``{"full_attention": {...}, "sliding_attention": {...}}``) with no top-level ``rope_theta`` or
``rope_scaling``; layer patterns as ``layer_types`` lists; text-only checkpoints of multimodal
families under their own ``*_text`` model type; non-finite floats as ``{"__float__": "Infinity"}``.
mlx-lm's models (``ModelArgs`` dataclasses) read the transformers 4 keys and fill in defaults
for what is missing, so such a folder would load and answer nonsense. ``for_mlx_lm`` maps:

- ``rope_parameters`` -> ``rope_theta``, ``rope_scaling`` (when its type is not ``default``),
  ``partial_rotary_factor``; per layer type: the full-attention entry, and the sliding one as
  ``rope_local_base_freq`` where the model reads it (gemma3);
- ``layer_types`` -> ``sliding_window_pattern`` or ``full_attention_interval`` where the model
  derives its layers from a period;
- ``num_local_experts`` -> ``num_experts`` where the model reads that name;
- ``qwen3_5_text`` / ``qwen3_5_moe_text`` -> their multimodal type with a ``text_config``.

An old-style ``rope_scaling`` dict (transformers 4) is read as it is; its keys that mlx-lm's RoPE
does not read, or a scaling the model ignores, are named in a warning (``warn_ignored_scaling``).
Vision-language folders (read by mlx-vlm) get the same mapping in ``vlm_config_compat``.

A key that changes the model's math and that nothing maps is refused (ConfigError naming it):
an unknown ``rope_type`` or scaling parameter (yarn's ``truncate: false``, which mlx-lm rounds
anyway, only gets a warning), scaling or a partial rotary factor for a model
that ignores them, per-layer RoPE the model cannot express, a layer pattern without a period,
or old and new keys that disagree. The mapping is pure (a new dict; the input is not changed),
so serving, discovery and the test-model factory give the same answer for the same file.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import math
from typing import Optional

logger = logging.getLogger("omlx.engine")

_FLOATS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}

# Text-only model types transformers 5 saves (``Qwen3_5ForCausalLM``) that mlx-lm knows only as
# the multimodal type with the text model under ``text_config``.
_TEXT_ONLY = {"qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}

# Per rope_type, the scaling keys mlx-lm's initialize_rope (models/rope_utils.py) reads; any
# other key in ``rope_parameters`` would change the math without mlx-lm noticing.
_SCALING_KEYS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "yarn": {
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
    },
    "longrope": {"original_max_position_embeddings", "short_factor", "long_factor", "factor"},
    "mrope": {"mrope_section", "mrope_interleaved"},
}
_SCALING_KEYS["deepseek_yarn"] = _SCALING_KEYS["yarn"]
# Keys that say nothing about the math, or that this module maps on its own.
_NEUTRAL_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
# yarn's ``truncate``: mlx-lm always rounds the correction range, which is truncate=True. False
# (gpt-oss's checkpoints) is accepted with a warning: refusing it would refuse every gpt-oss
# (the factory's tiny gpt_oss moves up to 0.7 in the logits; see inference.testkit.hf).
_YARN_TRUNCATE = "truncate"

# Periods mlx-lm derives a layer pattern from: field -> (the layer type at each period's end, the other).
_PERIODS = {
    "sliding_window_pattern": ("full_attention", "sliding_attention"),
    "full_attention_interval": ("full_attention", "linear_attention"),
}


class ConfigError(ValueError):
    """A config.json that mlx-lm would load with different math; the message names the key."""


def for_mlx_lm(config: dict) -> dict:
    """``config`` with transformers 5's keys mapped to the ones the installed mlx-lm reads (see
    the module docstring); ConfigError where a key that changes the math cannot be mapped."""
    config = _decode_floats(copy.deepcopy(config))
    model_type = config.get("model_type")
    if model_type in _TEXT_ONLY:
        config = _nest_text(config, _TEXT_ONLY[model_type])
    fields = _model_fields(config)
    if fields is None:  # not an mlx-lm model type: the loader says so
        return config
    _map_section(config, fields, "config.json")
    if isinstance(config.get("text_config"), dict):
        _map_section(config["text_config"], fields, "config.json text_config")
    return config


def _decode_floats(value):
    """transformers 5 writes non-finite floats as ``{"__float__": "Infinity"}``."""
    if isinstance(value, dict):
        if set(value) == {"__float__"} and value["__float__"] in _FLOATS:
            return _FLOATS[value["__float__"]]
        return {k: _decode_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_floats(v) for v in value]
    return value


def _nest_text(config: dict, model_type: str) -> dict:
    text = dict(config)
    return {
        "model_type": model_type,
        "text_config": text,
        "tie_word_embeddings": text.get("tie_word_embeddings", False),
        **{k: text[k] for k in ("eos_token_id", "bos_token_id", "pad_token_id") if k in text},
    }


def _model_fields(config: dict) -> Optional[set]:
    """The config keys the model's mlx-lm module reads: the fields of every ``ModelArgs``-like
    dataclass in it (the text model's arguments included), or None for an unknown type."""
    from mlx_lm.models.base import BaseModelArgs
    from mlx_lm.utils import _get_classes

    try:
        model_class, _ = _get_classes(config)
    except Exception:  # ValueError for an unknown model_type; anything else is as bad
        return None
    module = inspect.getmodule(model_class)
    fields = set()
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if obj.__module__ == module.__name__ and issubclass(obj, BaseModelArgs):
            if dataclasses.is_dataclass(obj):
                fields |= {f.name for f in dataclasses.fields(obj)}
    return fields


def _map_section(section: dict, fields: set, where: str) -> None:
    """Map one level of the config (the top, or its ``text_config``) in place."""
    warn_ignored_scaling(section, fields, where)
    _map_periods(section, fields, where)
    if "num_local_experts" in section and "num_experts" not in section:
        if "num_experts" in fields and "num_local_experts" not in fields:
            section["num_experts"] = section["num_local_experts"]
    rope = section.get("rope_parameters")
    if not rope:
        return
    if not isinstance(rope, dict):
        raise ConfigError(f"{where}: rope_parameters must be an object, not {rope!r}")
    if all(isinstance(v, dict) for v in rope.values()):
        _map_per_layer_rope(section, rope, fields, where)
    else:
        _map_rope(section, rope, fields, where, "rope_parameters")


def warn_ignored_scaling(section: dict, fields: set, where: str) -> None:
    """An old-style ``rope_scaling`` (transformers 4's key, read by the model as it is): what its
    RoPE does not read is named in a warning, as is a scaling the model ignores altogether
    (refusing would refuse folders that load today; ``rope_parameters`` is checked strictly)."""
    scaling = section.get("rope_scaling")
    if not isinstance(scaling, dict):
        return
    kind = "mrope" if "mrope_section" in scaling else scaling.get("rope_type", scaling.get("type", "default"))
    if kind != "default" and "rope_scaling" not in fields and "rope_parameters" not in fields:
        logger.warning("%s: rope_scaling (%s) is ignored by this model_type in mlx-lm", where, kind)
        return
    if kind not in _SCALING_KEYS:
        return  # mlx-lm's initialize_rope refuses a type it lacks, naming it
    ignored = sorted(k for k in scaling if k not in _NEUTRAL_KEYS | _SCALING_KEYS[kind] | {_YARN_TRUNCATE})
    if ignored:
        logger.warning("%s: rope_scaling %s ignored by mlx-lm's %s RoPE", where, ", ".join(ignored), kind)


def _map_per_layer_rope(section, rope, fields, where):
    full = rope.get("full_attention")
    if full is None:
        raise ConfigError(f"{where}: rope_parameters has no full_attention entry: {sorted(rope)}")
    others = {name: params for name, params in rope.items() if name != "full_attention"}
    local = others.pop("sliding_attention", None)
    if others and any(params != full for params in others.values()):
        raise ConfigError(f"{where}: rope_parameters for {sorted(others)} layers cannot be mapped to mlx-lm")
    if local is not None and "rope_local_base_freq" in fields:  # gemma3: its own base, no scaling
        _check_scaling(local, "default", where, "rope_parameters.sliding_attention")
        _set(section, "rope_local_base_freq", local["rope_theta"], where)
    elif local is not None and local != full:
        raise ConfigError(
            f"{where}: rope_parameters.sliding_attention differs from full_attention and this "
            f"model_type has one RoPE for all layers in mlx-lm"
        )
    _map_rope(section, full, fields, where, "rope_parameters.full_attention")


def _map_rope(section, params, fields, where, name):
    """One rope_parameters dict -> rope_theta, rope_scaling, partial_rotary_factor."""
    if "rope_theta" not in params:
        raise ConfigError(f"{where}: {name} has no rope_theta")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in _SCALING_KEYS:
        raise ConfigError(f"{where}: {name}.rope_type {rope_type!r} is not supported by mlx-lm")
    allowed = "rope_scaling" in fields or "rope_parameters" in fields
    _check_scaling(params, rope_type if allowed else "default", where, name)
    _set(section, "rope_theta", params["rope_theta"], where)
    if rope_type != "default":
        scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
        scaling.setdefault("rope_type", rope_type)
        if section.get("rope_scaling") is None:
            section["rope_scaling"] = scaling
        elif _differs(section["rope_scaling"], scaling):
            raise ConfigError(f"{where}: rope_scaling and {name} disagree")
    factor = params.get("partial_rotary_factor")
    if factor is not None and factor != 1.0:
        if "partial_rotary_factor" not in fields:
            raise ConfigError(f"{where}: {name}.partial_rotary_factor is {factor}; mlx-lm's model ignores it")
        _set(section, "partial_rotary_factor", factor, where)


def _check_scaling(params, rope_type, where, name):
    """Refuse a key of ``params`` that mlx-lm's RoPE of ``rope_type`` would ignore."""
    declared = params.get("rope_type", params.get("type", "default"))
    if declared != rope_type:
        raise ConfigError(f"{where}: {name}.rope_type {declared!r} is ignored by this model in mlx-lm")
    for key, value in params.items():
        if key in _NEUTRAL_KEYS or key in _SCALING_KEYS[rope_type]:
            continue
        if key == _YARN_TRUNCATE and rope_type in ("yarn", "deepseek_yarn"):
            if value is not True:  # every gpt-oss checkpoint says False: refusing would refuse them all
                logger.warning("%s: %s.truncate is %r; mlx-lm's YaRN truncates", where, name, value)
            continue
        raise ConfigError(f"{where}: {name}.{key} = {value!r} is not supported by mlx-lm's {rope_type} RoPE")


def _map_periods(section, fields, where):
    """``layer_types`` -> the period mlx-lm derives the same layers from."""
    layer_types = section.get("layer_types")
    if not isinstance(layer_types, list) or not layer_types:
        return
    for field, (last, other) in _PERIODS.items():
        if field not in fields:
            continue
        period = _period(layer_types, last, other)
        if period is None:
            raise ConfigError(
                f"{where}: layer_types {layer_types} is not a repeating pattern of {other} layers "
                f"ending in one {last} layer, the only form mlx-lm's {field} can express"
            )
        section[field] = period


def _period(layer_types, last, other) -> Optional[int]:
    for period in range(1, len(layer_types) + 1):
        pattern = [last if (i + 1) % period == 0 else other for i in range(len(layer_types))]
        if pattern == layer_types:
            return period
    return None


def _set(section, key, value, where):
    """Set a mapped key; a value already there (old and new keys together) must agree."""
    if section.get(key) is not None and _differs(section[key], value):
        raise ConfigError(f"{where}: {key} = {section[key]!r} disagrees with rope_parameters ({value!r})")
    section[key] = value


def _differs(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return any(_differs(a.get(k), b.get(k)) for k in keys - {"type", "rope_type"}) or (
            a.get("rope_type", a.get("type")) != b.get("rope_type", b.get("type"))
        )
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return not math.isclose(a, b, rel_tol=1e-9)
    return a != b
