"""The one table of test-model builders: architecture -> the module that builds it, and
``build_model``, the entry point every caller uses.

Every builder module has the same shape: ``ARCHITECTURES`` (the families it builds),
``preset_names(arch)`` and ``build(path, arch, preset, seed, dtype, overrides)``. Builders import
``base`` and ``tokenizer``, never this module, so the kit has no import cycle; none imports torch
or transformers at its top, so this table loads without them.

Two peers sit beside the table: ``inference.testkit.native.build_native`` writes a text family's
folder exactly as transformers 5 saves it (no keys added for mlx-lm), and
``inference.testkit.smollm2.build_smollm2`` a real trained model converted from a GGUF file.
"""

import tempfile
from pathlib import Path

from inference.testkit import encoders, hf, text, vlm, vlm_gemma3, vlm_mistral3, vlm_qwen
from inference.testkit.base import DTYPES
from inference.testkit.quantize import quantize_model

HAND_WRITTEN = text.ARCHITECTURES  # weights named here; no torch needed
TRANSFORMERS_BUILT = hf.ARCHITECTURES  # built with transformers' own classes; need omlx[test]
ENCODER_BUILT = encoders.ARCHITECTURES  # embedding and reranker folders; the bert ones need omlx[test]
QWEN_VISION_BUILT = vlm_qwen.ARCHITECTURES
# Vision-language models, built with transformers' classes (need omlx[test]).
VISION_BUILT = vlm.ARCHITECTURES + vlm_gemma3.ARCHITECTURES + vlm_mistral3.ARCHITECTURES + QWEN_VISION_BUILT
ARCHITECTURES = HAND_WRITTEN + TRANSFORMERS_BUILT + ENCODER_BUILT + VISION_BUILT

BUILDERS = {
    arch: module
    for module in (text, hf, encoders, vlm, vlm_gemma3, vlm_mistral3, vlm_qwen)
    for arch in module.ARCHITECTURES
}


def build_model(path, arch="qwen2", preset="tiny", seed=0, dtype="float32", **overrides) -> Path:
    """Write a model folder of architecture ``arch`` to ``path`` and return ``path`` as a Path.

    ``overrides`` replace config.json fields of the preset (``num_hidden_layers=4``, ``head_dim``,
    ``tie_word_embeddings``...; for the transformers-built families, any field of transformers'
    config class, plus ``sliding_window_pattern`` (gemma3_text) and ``full_attention_interval``
    (qwen3_5)). An unknown architecture, preset, dtype or field raises ValueError; a family that
    needs torch and transformers raises ImportError without them. ``preset_names(arch)`` lists the
    presets of ``arch``. The tokenizer has ``min(vocab_size, 1024)`` tokens; a larger model
    vocabulary (as in Qwen) has zero embedding and lm_head rows past it.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; expected one of {ARCHITECTURES}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(DTYPES)}")
    return BUILDERS[arch].build(path, arch, preset, seed, dtype, overrides)


def preset_names(arch):
    """The presets ``build_model`` accepts for ``arch``."""
    return BUILDERS[arch].preset_names(arch)


def build_quantized(path, bits, group_size=64, **build_args) -> Path:
    """``build_model(**build_args)`` into a temporary folder, then ``quantize_model`` into ``path``."""
    with tempfile.TemporaryDirectory() as tmp:
        source = build_model(Path(tmp) / "model", **build_args)
        if Path(path).exists() and not any(Path(path).iterdir()):
            Path(path).rmdir()  # convert refuses an existing folder, even an empty one
        quantize_model(source, path, bits=bits, group_size=group_size)
    return Path(path)
