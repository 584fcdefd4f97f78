"""Random-weight Qwen vision-language model folders (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), built with
transformers' own classes, for tests and ``omlx build-model --arch qwen2_5_vl`` (and the others).

The folder is what the family's checkpoint on the Hub holds, in the Hub's format:

- ``config.json``: Qwen2-VL and Qwen2.5-VL keep the language model's fields at the top level next
  to ``vision_config`` and ``rope_scaling = {"type": "mrope", "mrope_section": [...]}`` (the
  published Qwen/Qwen2.5-VL-*-Instruct configs); Qwen3-VL nests them in ``text_config``.
- the weights under the Hub's names (``visual.*`` and ``model.*`` for Qwen2/2.5-VL,
  ``model.visual.*`` and ``model.language_model.*`` for Qwen3-VL), in safetensors;
- the byte-level BPE tokenizer of ``inference.testkit.tokenizer`` with the family's vision tokens
  ``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``, ``<|video_pad|>`` (ids 3 to 6);
- ``preprocessor_config.json`` (the Qwen2-VL image processor: patch size, merge size and pixel
  bounds; a picture becomes ``(h/patch) * (w/patch) / merge**2`` ``<|image_pad|>`` tokens),
  ``video_preprocessor_config.json`` and ``processor_config.json``, so that mlx-vlm's processor
  loads the folder without the network.

The chat template renders an image part as ``<|vision_start|><|image_pad|><|vision_end|>``, as
the family's does. Weights are redrawn like the LLaVA model's (``vlm._redraw``):
outputs depend visibly on the image, and greedy decoding is stable between two MLX computations
of different chunking. The files are a pure function of the arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

from inference.testkit.base import COMMON_SPECIALS, require_test_extra
from inference.testkit.vlm import _redraw, chat_template, save_weights, start_folder, write_template_files

ARCHITECTURES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
_SPECIALS = COMMON_SPECIALS + VISION_TOKENS
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = (_SPECIALS.index(t) for t in VISION_TOKENS)

CHAT_TEMPLATE = chat_template("<|vision_start|><|image_pad|><|vision_end|>")

_TEXT = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=1024,
    max_position_embeddings=4096,
)
# mrope_section: the rotary half-dimension (head_dim / 2 = 8) split over time, height and width.
PRESETS = {
    "tiny": dict(text=_TEXT, mrope_section=[2, 3, 3], merge=2, min_pixels=28 * 28, max_pixels=112 * 112)
}
_PATCH = {"qwen2_vl": 14, "qwen2_5_vl": 14, "qwen3_vl": 16}
_MEAN, _STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def preset_names(arch):
    return tuple(PRESETS)


def build(path, arch="qwen2_5_vl", preset="tiny", seed=0, dtype="float32", overrides=None) -> Path:
    """Write the folder to ``path`` and return it as a Path. ``overrides``: fields of the
    language model (e.g. ``num_hidden_layers``)."""
    require_test_extra("building a Qwen vision test model")
    import torch

    path, fields, text, _ = start_folder(
        path, arch, preset, ARCHITECTURES, PRESETS, "Qwen vision", seed, overrides, _SPECIALS, CHAT_TEMPLATE
    )
    model, hub_config = _model(arch, text, fields)
    torch.manual_seed(seed)
    _redraw(model, seed, text["hidden_size"])
    save_weights(model, path, dtype)
    _hub_names(path / "model.safetensors", arch)
    hub_config["torch_dtype"] = dtype
    (path / "config.json").write_text(json.dumps(hub_config, indent=2, sort_keys=True))
    _processor_files(path, arch, fields)
    return path


def _model(arch, text, fields):
    """(the transformers model, the config.json dict in the Hub's format)."""
    ids = dict(
        image_token_id=IMAGE_PAD,
        video_token_id=VIDEO_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )
    lm = dict(
        text,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=0,
        hidden_act="silu",
    )
    patch, merge = _PATCH[arch], fields["merge"]
    if arch == "qwen3_vl":
        from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

        head_dim = text["hidden_size"] // text["num_attention_heads"]
        rope = {"rope_type": "default", "mrope_section": fields["mrope_section"], "mrope_interleaved": True}
        vision = dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=text["hidden_size"],
            patch_size=patch,
            spatial_merge_size=merge,
            temporal_patch_size=2,
            in_channels=3,
            num_position_embeddings=64,
            deepstack_visual_indexes=[0],
            hidden_act="gelu_pytorch_tanh",
        )
        config = Qwen3VLConfig(
            text_config=dict(
                lm,
                head_dim=head_dim,
                attention_bias=False,
                rope_parameters=dict(rope, rope_theta=lm["rope_theta"]),
            ),
            vision_config=vision,
            tie_word_embeddings=False,
            **ids,
        )
        hub = dict(
            architectures=["Qwen3VLForConditionalGeneration"],
            model_type="qwen3_vl",
            tie_word_embeddings=False,
            **ids,
            text_config=dict(
                lm,
                model_type="qwen3_vl_text",
                head_dim=head_dim,
                attention_bias=False,
                attention_dropout=0.0,
                rope_scaling=rope,
            ),
            vision_config=dict(vision, model_type="qwen3_vl", initializer_range=0.02),
        )
        return Qwen3VLForConditionalGeneration(config).eval(), hub
    rope = {"type": "mrope", "rope_type": "default", "mrope_section": fields["mrope_section"]}
    if arch == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig as Config, Qwen2_5_VLForConditionalGeneration as Model

        vision = dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=text["hidden_size"],
            patch_size=patch,
            spatial_merge_size=merge,
            temporal_patch_size=2,
            window_size=2 * patch * merge,
            fullatt_block_indexes=[1],
            hidden_act="silu",
            in_channels=3,
            tokens_per_second=2,
        )
        name = "Qwen2_5_VLForConditionalGeneration"
    else:
        from transformers import Qwen2VLConfig as Config, Qwen2VLForConditionalGeneration as Model

        vision = dict(
            depth=2,
            embed_dim=32,
            mlp_ratio=2,
            num_heads=2,
            hidden_size=text["hidden_size"],
            patch_size=patch,
            spatial_merge_size=merge,
            temporal_patch_size=2,
            in_channels=3,
            hidden_act="quick_gelu",
        )
        name = "Qwen2VLForConditionalGeneration"
    config = Config(
        text_config=dict(lm, rope_parameters=dict(rope, rope_theta=lm["rope_theta"])),
        vision_config=vision,
        **ids,
    )
    hub = dict(
        lm,
        architectures=[name],
        model_type=arch,
        rope_scaling=rope,
        attention_dropout=0.0,
        sliding_window=text["max_position_embeddings"],
        use_sliding_window=False,
        max_window_layers=text["num_hidden_layers"],
        vision_config=dict(vision, model_type=arch, initializer_range=0.02),
        **ids,
    )
    return Model(config).eval(), hub


def _hub_names(weights: Path, arch: str) -> None:
    """Rename transformers' saved weights to the Hub's names of the family (mlx-vlm reads those)."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(weights))
    if arch == "qwen3_vl":
        rename = lambda k: k  # noqa: E731  (transformers saves the Hub's names)
    else:

        def rename(k):
            if k.startswith("model.visual."):
                return k[len("model.") :]
            if k.startswith("model.language_model."):
                return "model." + k[len("model.language_model.") :]
            return k

    save_file({rename(k): v for k, v in tensors.items()}, str(weights), metadata={"format": "pt"})


def _processor_files(path: Path, arch: str, fields: dict) -> None:
    patch, merge = _PATCH[arch], fields["merge"]
    image = dict(
        do_convert_rgb=True,
        do_normalize=True,
        do_rescale=True,
        do_resize=True,
        image_mean=_MEAN,
        image_std=_STD,
        rescale_factor=1 / 255,
        merge_size=merge,
        patch_size=patch,
        temporal_patch_size=2,
        min_pixels=fields["min_pixels"],
        max_pixels=fields["max_pixels"],
        size={"shortest_edge": fields["min_pixels"], "longest_edge": fields["max_pixels"]},
        image_processor_type="Qwen2VLImageProcessor",
        processor_class=_PROCESSOR[arch],
    )
    (path / "preprocessor_config.json").write_text(json.dumps(image, indent=2, sort_keys=True))
    video = dict(image, video_processor_type="Qwen2VLVideoProcessor")
    video.pop("image_processor_type")
    (path / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2, sort_keys=True))
    (path / "processor_config.json").write_text(json.dumps({"processor_class": _PROCESSOR[arch]}, indent=2))
    write_template_files(path, CHAT_TEMPLATE)


_PROCESSOR = {
    "qwen2_vl": "Qwen2VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
    "qwen3_vl": "Qwen3VLProcessor",
}
