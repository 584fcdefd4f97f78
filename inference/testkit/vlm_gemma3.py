"""A random-weight Gemma 3 vision-language model folder (SigLIP vision tower, Gemma 3's pooling
projector, a Gemma 3 language model with sliding-window and global layers), built with
transformers' own classes, for tests and ``omlx build-model --arch gemma3``.

The folder is what a Gemma 3 checkpoint on the Hub holds (google/gemma-3-4b-it's layout):
``config.json`` (``Gemma3Config``: ``text_config``, ``vision_config``, ``mm_tokens_per_image``,
``boi_token_index``, ``eoi_token_index``, ``image_token_index``), the weights under the Hub's
names (``language_model.model.*``, ``vision_tower.vision_model.*``, ``multi_modal_projector.*``),
the byte-level BPE tokenizer of ``inference.testkit.tokenizer`` with Gemma 3's image tokens
``<start_of_image>``, ``<end_of_image>``, ``<image_soft_token>`` (ids 3 to 5, named in the
tokenizer config as ``boi_token``, ``eoi_token``, ``image_token``), ``preprocessor_config.json``
(the Gemma 3 image processor, no pan and scan) and ``processor_config.json``
(``image_seq_length``): the processor expands each ``<start_of_image>`` into
``\\n\\n<start_of_image>`` + ``mm_tokens_per_image`` image tokens + ``<end_of_image>\\n\\n``.

The chat template is ChatML with an image part rendered as ``<start_of_image>``. The tiny preset
has one sliding-window layer (window 16) and one global layer, so prompts longer than the window
exercise the block cache's sliding-window snapshots. Weights are redrawn as the LLaVA model's
(``vlm._redraw``). The files are a pure function of the arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

from inference.testkit.base import COMMON_SPECIALS, require_test_extra
from inference.testkit.vlm import (
    _LOGIT_STD,
    _redraw,
    chat_template,
    save_weights,
    start_folder,
    write_template_files,
)

ARCHITECTURES = ("gemma3",)
BOI, EOI, IMAGE = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
_SPECIALS = COMMON_SPECIALS + (BOI, EOI, IMAGE)

CHAT_TEMPLATE = chat_template(BOI)

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
            sliding_window=16,
            sliding_window_pattern=2,
            query_pre_attn_scalar=16,
        ),
        vision=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=56,
            patch_size=14,
        ),
        mm_tokens_per_image=4,
    ),
}


def preset_names(arch):
    return tuple(PRESETS)


def build(path, arch="gemma3", preset="tiny", seed=0, dtype="float32", overrides=None) -> Path:
    """Write the folder to ``path`` and return it as a Path. ``overrides``: Gemma3TextConfig
    fields (e.g. ``num_hidden_layers``)."""
    require_test_extra("building a Gemma 3 vision test model")
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    path, fields, text, _ = start_folder(
        path,
        arch,
        preset,
        ARCHITECTURES,
        PRESETS,
        "Gemma 3 vision",
        seed,
        overrides,
        _SPECIALS,
        CHAT_TEMPLATE,
        boi_token=BOI,
        eoi_token=EOI,
        image_token=IMAGE,
        extra_special_tokens={"boi_token": BOI, "eoi_token": EOI, "image_token": IMAGE},
    )
    pattern = text.pop("sliding_window_pattern")
    layer_types = [
        "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
        for i in range(text["num_hidden_layers"])
    ]
    lm = dict(
        text,
        rms_norm_eps=1e-6,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=0,
        hidden_activation="gelu_pytorch_tanh",
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )
    vision = dict(fields["vision"], layer_norm_eps=1e-6, vision_use_head=False)
    ids = dict(
        boi_token_index=_SPECIALS.index(BOI),
        eoi_token_index=_SPECIALS.index(EOI),
        image_token_index=_SPECIALS.index(IMAGE),
        mm_tokens_per_image=fields["mm_tokens_per_image"],
    )
    config = Gemma3Config(text_config=dict(lm, layer_types=layer_types), vision_config=vision, **ids)
    config.eos_token_id = 2
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config).eval()
    _redraw(model, seed, text["hidden_size"])
    _tied_head(model, seed, text["hidden_size"])
    save_weights(model, path, dtype)
    _hub_names(path / "model.safetensors")
    # vocab_size at the top too: mlx-lm reads a gemma3 folder as text from there (default 262208,
    # the real vocabulary, which Hub configs leave out).
    hub = dict(
        architectures=["Gemma3ForConditionalGeneration"],
        model_type="gemma3",
        eos_token_id=2,
        initializer_range=0.02,
        torch_dtype=dtype,
        vocab_size=text["vocab_size"],
        **ids,
        text_config=dict(
            lm,
            model_type="gemma3_text",
            sliding_window_pattern=pattern,
            layer_types=layer_types,
            rope_theta=1000000.0,
            rope_local_base_freq=10000.0,
            rope_scaling=None,
            mm_tokens_per_image=fields["mm_tokens_per_image"],
        ),
        vision_config=dict(vision, model_type="siglip_vision_model", num_channels=3),
    )
    (path / "config.json").write_text(json.dumps(hub, indent=2, sort_keys=True))
    side = vision["image_size"]
    image = dict(
        do_convert_rgb=None,
        do_normalize=True,
        do_pan_and_scan=None,
        do_rescale=True,
        do_resize=True,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        image_seq_length=fields["mm_tokens_per_image"],
        image_processor_type="Gemma3ImageProcessor",
        processor_class="Gemma3Processor",
        resample=2,
        rescale_factor=1 / 255,
        size={"height": side, "width": side},
    )
    (path / "preprocessor_config.json").write_text(json.dumps(image, indent=2, sort_keys=True))
    (path / "processor_config.json").write_text(
        json.dumps(
            {"image_seq_length": fields["mm_tokens_per_image"], "processor_class": "Gemma3Processor"},
            indent=2,
        )
    )
    write_template_files(path, CHAT_TEMPLATE)
    return path


def _tied_head(model, seed, hidden_size) -> None:
    """Gemma's output head is its embedding (tied) and the embeddings enter scaled by
    sqrt(hidden): embeddings of std 1/sqrt(hidden) enter at unit variance (at unit std they
    would drown the layers and the model would repeat its input), and the final norm's gain
    spreads the logits over tens of units (``vlm._LOGIT_STD``) as in the other
    test models. Gemma's RMSNorm multiplies by ``1 + weight``."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                value = rng.normal(0.0, 1.0 / np.sqrt(hidden_size), tuple(param.shape))
                param.copy_(torch.from_numpy(value.astype(np.float32)))
            elif name.endswith("language_model.norm.weight"):
                param.fill_(_LOGIT_STD - 1.0)


def _hub_names(weights: Path) -> None:
    """The Hub checkpoints' names (mlx-vlm reads those): transformers writes the language model
    and the projector under them already (``language_model.model.*``,
    ``multi_modal_projector.*``; older versions with a ``model.`` prefix) and the SigLIP tower
    one level up (``vision_tower.*`` for ``vision_tower.vision_model.*``); the output head is
    tied to the embeddings and left out, as in the published checkpoints."""
    from safetensors.numpy import load_file, save_file

    renamed = {}
    for key, value in load_file(str(weights)).items():
        if key.startswith("lm_head."):
            continue
        if key.startswith("model.language_model."):
            key = "language_model.model." + key[len("model.language_model.") :]
        elif key.startswith("model."):
            key = key[len("model.") :]
        if key.startswith("vision_tower.") and not key.startswith("vision_tower.vision_model."):
            key = "vision_tower.vision_model." + key[len("vision_tower.") :]
        renamed[key] = value
    save_file(renamed, str(weights), metadata={"format": "pt"})
