"""A vision-language folder's config.json as the installed mlx-vlm reads it: the peer of
``config_compat`` (mlx-lm's text models) for the families served with images.

transformers 5 saves a VLM with its language model under ``text_config`` (Qwen2-VL and
Qwen2.5-VL included, whose Hub configs keep those fields at the top, where mlx-vlm reads them),
its RoPE as ``rope_parameters`` (MRoPE's ``mrope_section`` inside it; gemma3's one entry per
layer type) and its layer pattern as ``layer_types``. mlx-vlm's text configs read the Hub's keys
and fill in defaults for the rest, so such a folder would load and answer nonsense (or not load).
``for_mlx_vlm`` maps:

- Qwen2-VL / Qwen2.5-VL: ``text_config``'s fields to the top level (where they are missing),
  and the vision tower's ``model_type`` (``qwen2_vl_vision``) to the family's, as the Hub's;
- ``rope_parameters`` with an ``mrope_section`` -> ``rope_scaling = {"type": "mrope",
  "mrope_section": ...}`` (what mlx-vlm's MRoPE reads), the rest as ``config_compat`` maps it
  (``rope_theta``, per-layer-type RoPE, ``layer_types`` -> ``sliding_window_pattern``);
- gemma3: the global RoPE base (``rope_theta``, or ``rope_parameters.full_attention``) to
  ``rope_global_base_freq``, the only name mlx-vlm's gemma3 reads (a Hub config's ``rope_theta``
  is otherwise ignored).

What ``config_compat`` refuses is refused here too (ConfigError); an old-style ``rope_scaling``
key the model does not read gets a warning naming it (``config_compat.warn_ignored_scaling``).
Pure: a new dict; the input is not changed.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import Optional

from . import config_compat
from .config_compat import ConfigError

__all__ = ["ConfigError", "for_mlx_vlm"]

# Families whose mlx-vlm config reads the language model's fields at the top level.
_TOP_LEVEL_TEXT = ("qwen2_vl", "qwen2_5_vl")
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")


def for_mlx_vlm(config: dict) -> dict:
    """``config`` with transformers 5's keys mapped to the ones the installed mlx-vlm reads (see
    the module docstring); ConfigError where a key that changes the math cannot be mapped."""
    config = config_compat._decode_floats(copy.deepcopy(config))
    fields = _text_fields(config)
    if fields is None:  # not an mlx-vlm model type: the loader says so
        return config
    text = config.get("text_config")
    if config.get("model_type") in _TOP_LEVEL_TEXT or not isinstance(text, dict):
        if isinstance(text, dict):
            for key, value in text.items():
                if key not in ("model_type", "architectures"):
                    config.setdefault(key, value)
        vision = config.get("vision_config")
        if isinstance(vision, dict) and vision.get("model_type") == f"{config['model_type']}_vision":
            vision["model_type"] = config["model_type"]  # the only name their mlx-vlm tower takes
        section, where = config, "config.json"
    else:
        section, where = text, "config.json text_config"
    _map_mrope(section, where)
    if "rope_global_base_freq" in fields and "rope_theta" not in fields:
        _map_global_base(section, where)
    config_compat._map_section(section, fields, where)  # warns of ignored rope_scaling keys too
    return config


def _text_fields(config: dict) -> Optional[set]:
    """The fields of the mlx-vlm model's text config, or None for a type mlx-vlm lacks."""
    try:
        from mlx_vlm.utils import get_model_and_args

        module, _ = get_model_and_args(config)
    except Exception:  # ImportError without mlx-vlm, ValueError for an unknown type
        return None
    text_config = getattr(module, "TextConfig", None)
    if text_config is None or not dataclasses.is_dataclass(text_config):
        return None
    return {f.name for f in dataclasses.fields(text_config)} | set(inspect.signature(text_config).parameters)


def _map_mrope(section: dict, where: str) -> None:
    """MRoPE's sections inside ``rope_parameters`` -> the ``rope_scaling`` mlx-vlm reads."""
    rope = section.get("rope_parameters")
    if not isinstance(rope, dict) or "mrope_section" not in rope:
        return
    rope = dict(rope)
    scaling = {"type": "mrope", **{k: rope.pop(k) for k in _MROPE_KEYS if k in rope}}
    if rope.get("type") == "mrope":
        rope.pop("type")
    old = section.get("rope_scaling")
    if old is not None and (
        not isinstance(old, dict) or old.get("mrope_section") != scaling["mrope_section"]
    ):
        raise ConfigError(f"{where}: rope_scaling and rope_parameters disagree on mrope_section")
    section["rope_scaling"] = dict(old or {}, **scaling)
    section["rope_parameters"] = rope


def _map_global_base(section: dict, where: str) -> None:
    """gemma3: the global RoPE base under the name mlx-vlm reads."""
    rope = section.get("rope_parameters")
    full = rope.get("full_attention") if isinstance(rope, dict) else None
    base = full.get("rope_theta") if isinstance(full, dict) else section.get("rope_theta")
    if base is not None:
        config_compat._set(section, "rope_global_base_freq", base, where)
