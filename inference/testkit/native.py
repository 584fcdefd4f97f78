"""Model folders exactly as transformers 5 writes them: ``save_pretrained`` of a transformers model
with the factory's random weights, nothing repaired afterwards (no ``rope_theta`` next to
``rope_parameters``, no mlx-lm period beside ``layer_types``, transformers' own weight layout).

This is what new fine-tunes and conversions look like; the serving path must load it as is
(inference.engine.config_compat). ``build_native`` covers the text families of the factory's
list: the hand-written ones (``inference.testkit.text``) get transformers' config class with the
same preset, the transformers-built ones (``inference.testkit.hf``) their usual config.

Needs torch and transformers (``pip install 'omlx[test]'``); the server never imports this.
"""

from pathlib import Path

from inference.testkit import hf, text
from inference.testkit.base import DTYPES, special_tokens
from inference.testkit.tokenizer import write_tokenizer

ARCHITECTURES = text.ARCHITECTURES + hf.ARCHITECTURES

# Fields of the hand-written presets that transformers' config classes spell differently.
_TEXT_DROP = ("architectures", "rope_scaling", "rope_theta", "torch_dtype", "model_type")


def build_native(path, arch, preset="tiny", seed=0, dtype="float32", **overrides) -> Path:
    """Write ``arch``'s folder with ``save_pretrained`` into ``path`` and return it as a Path.

    ``preset`` and ``overrides`` are those of ``inference.testkit.registry.build_model``; a
    ``rope_parameters`` override (transformers 5's form) sets the RoPE. ValueError for an
    unknown architecture or dtype."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; expected one of {ARCHITECTURES}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(DTYPES)}")
    hf._require_transformers()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    config, family = _config(arch, preset, dtype, overrides)
    path = Path(path)
    vocab = write_tokenizer(path, family, config.vocab_size, seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = model.state_dict()
    with torch.no_grad():
        for name, array in hf._redraw(arch, config, state, vocab, seed, special_tokens(family)):
            state[name].copy_(torch.from_numpy(array))
    model.to(getattr(torch, dtype)).save_pretrained(path, safe_serialization=True)
    return path


def _config(arch, preset, dtype, overrides):
    """transformers' config object for the folder, and the tokenizer family."""
    if arch in hf.ARCHITECTURES:
        fields = dict(hf.PRESETS[arch][preset], **overrides)
        return hf._hf_config(arch, fields), hf.TEMPLATE_FAMILY[arch]
    from transformers import AutoConfig

    fields = text.build_config(arch, preset, dtype, {})
    rope_theta = fields["rope_theta"]
    fields = {k: v for k, v in fields.items() if k not in _TEXT_DROP}
    if fields.get("head_dim") is None:
        fields.pop("head_dim", None)
    fields["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
    fields.update(overrides)
    return AutoConfig.for_model(arch, **fields), arch
