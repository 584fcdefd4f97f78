"""A random-weight vision-language model folder (LLaVA: a CLIP vision tower, a two-layer projector
and a llama language model), built with transformers' own classes, for tests and ``omlx
build-model --arch llava``.

The folder is what a LLaVA checkpoint on the Hub holds: ``config.json`` (``LlavaConfig``), the
weights in safetensors, the byte-level BPE tokenizer of ``inference.testkit.tokenizer`` with one more
special token, ``<image>`` (id 3, the config's ``image_token_index``), and the processor files
(``preprocessor_config.json`` for the CLIP image processor, ``processor_config.json``) so that
mlx-vlm's and transformers' ``AutoProcessor`` expand one ``<image>`` into the image's patch tokens.

The chat template is ChatML; a message's content is a string or a list of parts, where a part
``{"type": "image"}`` renders as ``<image>`` and ``{"type": "text", "text": ...}`` as its text.

Weights are redrawn after transformers' init so that outputs depend visibly on the image and the
logits spread over tens of units (greedy decoding then agrees between two MLX computations of
different chunking): linear layers with unit-gain fan-in scaling, embeddings with unit variance,
the output head with ``_LOGIT_STD`` spread. The files are a pure function of the arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from inference.testkit.base import COMMON_SPECIALS, require_test_extra
from inference.testkit.tokenizer import tokenizer_config, train_tokenizer

ARCHITECTURES = ("llava",)
IMAGE_TOKEN = "<image>"
_SPECIALS = COMMON_SPECIALS + (IMAGE_TOKEN,)
_LOGIT_STD = 16.0


def chat_template(image: str) -> str:
    """ChatML whose message content is a string or a list of parts: a ``{"type": "image"}`` part
    renders as ``image`` (the family's placeholder), a text part as its text. Every test VLM's."""
    return (
        "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
        "{%- if message.content is string %}{{ message.content }}"
        "{%- else %}{%- for part in message.content %}"
        "{%- if part.type == 'image' %}"
        + image
        + "{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}"
        "{%- endfor %}{%- endif %}<|im_end|>\n{%- endfor %}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
    )


CHAT_TEMPLATE = chat_template(IMAGE_TOKEN)

PRESETS = {
    "tiny": dict(
        text=dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=1024,
            max_position_embeddings=4096,
        ),
        vision=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=56,
            patch_size=14,
            projection_dim=32,
        ),
    ),
}


def preset_names(arch):
    return tuple(PRESETS)


def build(path, arch="llava", preset="tiny", seed=0, dtype="float32", overrides=None) -> Path:
    """Write the folder to ``path`` and return it as a Path. ``overrides``: LlamaConfig fields of
    the language model (e.g. ``num_hidden_layers``). The image is ``image_size`` pixels square
    and becomes ``(image_size / patch_size) ** 2`` tokens (16 for the tiny preset)."""
    require_test_extra("building a LLaVA test model")
    import torch
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    path, fields, text, tokenizer = start_folder(
        path, arch, preset, ARCHITECTURES, PRESETS, "vision", seed, overrides, _SPECIALS, CHAT_TEMPLATE
    )
    vision = fields["vision"]
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**vision).to_dict(),
        text_config=LlamaConfig(
            bos_token_id=0,
            eos_token_id=2,
            pad_token_id=0,
            tie_word_embeddings=False,
            rms_norm_eps=1e-6,
            **text,
        ).to_dict(),
        image_token_index=_SPECIALS.index(IMAGE_TOKEN),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        image_seq_length=(vision["image_size"] // vision["patch_size"]) ** 2,
    )
    config.eos_token_id = 2
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    _redraw(model, seed, text["hidden_size"])
    save_weights(model, path, dtype)
    _hub_names(path / "model.safetensors")
    side = vision["image_size"]
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": side}, crop_size={"height": side, "width": side}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=vision["patch_size"],
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(str(path))
    return path


def start_folder(
    path,
    arch,
    preset,
    architectures,
    presets,
    family,
    seed,
    overrides,
    specials,
    template,
    **tokenizer_fields,
):
    """What every test VLM's ``build`` starts with: check ``arch`` and ``preset`` (ValueError naming
    the ``family``), make the folder, write the tokenizer (``tokenizer_fields``: more entries of
    tokenizer_config.json) and load it. Returns (the folder as a Path, the preset's fields, the
    language model's fields with ``overrides``, the loaded tokenizer)."""
    from transformers import PreTrainedTokenizerFast

    if arch not in architectures:
        raise ValueError(f"unknown {family} architecture {arch!r}; expected one of {architectures}")
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r} for {arch}; expected one of {tuple(presets)}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fields = presets[preset]
    text = dict(fields["text"], **(overrides or {}))
    (path / "tokenizer.json").write_text(
        train_tokenizer(min(text["vocab_size"], 1024), seed, specials), encoding="utf-8"
    )
    config_json = tokenizer_config(specials, template)
    config_json.update(tokenizer_fields)
    (path / "tokenizer_config.json").write_text(json.dumps(config_json, indent=2))
    return path, fields, text, PreTrainedTokenizerFast.from_pretrained(str(path))


def save_weights(model, path: Path, dtype: str) -> None:
    """The transformers model in ``dtype``, saved to the folder in safetensors."""
    import torch

    model.to({"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype])
    model.save_pretrained(str(path), safe_serialization=True)


def write_template_files(path: Path, template: str) -> None:
    """chat_template.json (where mlx-vlm's processors read the template) and generation_config.json."""
    (path / "chat_template.json").write_text(json.dumps({"chat_template": template}, indent=2))
    (path / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 0})
    )


def _redraw(model, seed, hidden_size) -> None:
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            shape = tuple(param.shape)
            if name.endswith("bias"):
                value = np.zeros(shape)
            elif param.ndim == 1:  # norm gains
                value = np.ones(shape)
            elif "lm_head" in name:
                value = rng.normal(0.0, _LOGIT_STD / np.sqrt(hidden_size), shape)
            elif "embed" in name and param.ndim == 2:
                value = rng.normal(0.0, 1.0, shape)
            else:
                fan_in = int(np.prod(shape[1:]))
                value = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
            param.copy_(torch.from_numpy(value.astype(np.float32)))


def _hub_names(weights: Path) -> None:
    """The CLIP tower's weights under ``vision_tower.vision_model.``, as in the llava-hf
    checkpoints on the Hub (transformers saves them one level up; mlx-vlm reads the Hub's)."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(weights))
    renamed = {
        ("vision_tower.vision_model." + k[len("vision_tower.") :] if k.startswith("vision_tower.") else k): v
        for k, v in tensors.items()
    }
    save_file(renamed, str(weights), metadata={"format": "pt"})
