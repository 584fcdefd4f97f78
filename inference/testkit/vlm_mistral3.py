"""A random-weight Mistral 3 vision-language model folder (Pixtral vision tower, Mistral 3's
patch-merging projector, a Mistral language model), built with transformers' own classes, for
tests and ``omlx build-model --arch mistral3``.

The folder is what a Mistral 3.1 checkpoint in transformers' format holds
(mistralai/Mistral-Small-3.1-24B-Instruct-2503's layout): ``config.json`` (``Mistral3Config``:
``text_config``, ``vision_config`` of ``model_type`` ``pixtral``, ``image_token_index``,
``spatial_merge_size``), the weights under the Hub's names (``language_model.model.*``,
``language_model.lm_head.*``, ``vision_tower.*``, ``multi_modal_projector.*``), the byte-level
BPE tokenizer of ``inference.testkit.tokenizer`` with Pixtral's ``[IMG]``, ``[IMG_BREAK]``,
``[IMG_END]`` (ids 3 to 5), ``preprocessor_config.json`` (the Pixtral image processor: a picture
keeps its aspect ratio within ``longest_edge``, in patches) and ``processor_config.json``
(``patch_size``, ``spatial_merge_size``). The processor expands each ``[IMG]`` into rows of
``[IMG]`` tokens (one per merged patch) separated by ``[IMG_BREAK]`` and closed by
``[IMG_END]``, so the number of image tokens follows the picture's size.

The chat template is ChatML with an image part rendered as ``[IMG]``. Weights are redrawn as
the LLaVA model's (``vlm._redraw``). The files are a pure function of the
arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

from inference.testkit.base import COMMON_SPECIALS, require_test_extra
from inference.testkit.vlm import _redraw, chat_template, save_weights, start_folder, write_template_files

ARCHITECTURES = ("mistral3",)
IMAGE_TOKENS = ("[IMG]", "[IMG_BREAK]", "[IMG_END]")
_SPECIALS = COMMON_SPECIALS + IMAGE_TOKENS

CHAT_TEMPLATE = chat_template("[IMG]")

PRESETS = {
    "tiny": dict(
        text=dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=128,
            vocab_size=1024,
            max_position_embeddings=4096,
        ),
        vision=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            head_dim=16,
            image_size=112,
            patch_size=14,
        ),
        spatial_merge_size=2,
    ),
}


def preset_names(arch):
    return tuple(PRESETS)


def build(path, arch="mistral3", preset="tiny", seed=0, dtype="float32", overrides=None) -> Path:
    """Write the folder to ``path`` and return it as a Path. ``overrides``: MistralConfig fields
    of the language model. Pictures are sized to fit ``image_size`` (112) pixels in whole
    28-pixel merged patches: a 60x60 picture is 3x3 = 9 image tokens."""
    require_test_extra("building a Mistral 3 vision test model")
    import torch
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    path, fields, text, _ = start_folder(
        path,
        arch,
        preset,
        ARCHITECTURES,
        PRESETS,
        "Mistral 3 vision",
        seed,
        overrides,
        _SPECIALS,
        CHAT_TEMPLATE,
    )
    lm = dict(
        text,
        model_type="mistral",
        rms_norm_eps=1e-5,
        rope_theta=1000000000.0,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        sliding_window=None,
        hidden_act="silu",
    )
    vision = dict(
        fields["vision"], model_type="pixtral", rope_theta=10000.0, hidden_act="gelu", num_channels=3
    )
    merge = fields["spatial_merge_size"]
    top = dict(
        image_token_index=_SPECIALS.index("[IMG]"),
        spatial_merge_size=merge,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        multimodal_projector_bias=False,
    )
    config = Mistral3Config(text_config=lm, vision_config=vision, tie_word_embeddings=False, **top)
    config.eos_token_id = 2
    torch.manual_seed(seed)
    model = Mistral3ForConditionalGeneration(config).eval()
    _redraw(model, seed, text["hidden_size"])
    save_weights(model, path, dtype)
    _hub_names(path / "model.safetensors")
    hub = dict(
        architectures=["Mistral3ForConditionalGeneration"],
        model_type="mistral3",
        torch_dtype=dtype,
        eos_token_id=2,
        tie_word_embeddings=False,
        text_config=lm,
        vision_config=vision,
        **top,
    )
    (path / "config.json").write_text(json.dumps(hub, indent=2, sort_keys=True))
    patch, side = vision["patch_size"], vision["image_size"]
    image = dict(
        do_convert_rgb=True,
        do_normalize=True,
        do_rescale=True,
        do_resize=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
        image_processor_type="PixtralImageProcessor",
        processor_class="PixtralProcessor",
        patch_size={"height": patch, "width": patch},
        resample=3,
        rescale_factor=1 / 255,
        size={"longest_edge": side},
    )
    (path / "preprocessor_config.json").write_text(json.dumps(image, indent=2, sort_keys=True))
    (path / "processor_config.json").write_text(
        json.dumps(
            {
                "image_break_token": "[IMG_BREAK]",
                "image_end_token": "[IMG_END]",
                "image_token": "[IMG]",
                "patch_size": patch,
                "processor_class": "PixtralProcessor",
                "spatial_merge_size": merge,
            },
            indent=2,
        )
    )
    write_template_files(path, CHAT_TEMPLATE)
    return path


def _hub_names(weights: Path) -> None:
    """transformers' saved names, with or without its ``model.`` prefix, to the Hub's
    (``language_model.model.*``, ``language_model.lm_head.*``, ``vision_tower.*``,
    ``multi_modal_projector.*``), which mlx-vlm reads."""
    from safetensors.numpy import load_file, save_file

    renamed = {}
    for key, value in load_file(str(weights)).items():
        if key.startswith("lm_head."):
            key = "language_model." + key
        elif key.startswith("model.language_model."):
            key = "language_model.model." + key[len("model.language_model.") :]
        elif key.startswith("model."):
            key = key[len("model.") :]
        renamed[key] = value
    save_file(renamed, str(weights), metadata={"format": "pt"})
