"""A vision-language model folder loaded with mlx-vlm, served by the text engine.

The engine runs ``TextModel``: the VLM's language model behind mlx-lm's calling convention
(``model(tokens, cache=...)`` -> logits, ``input_embeddings=`` for a prefill that carries image
features), so the decode batch, the block cache, the head gate and the probes work as for any
mlx-lm model. ``VisionModel`` holds the whole mlx-vlm model (vision tower and projector) and the
processor; it turns a prompt's token ids and pixels into input embeddings, on the engine thread.

Served with images: the families of ``IMAGE_FAMILIES``, checked end to end against mlx-vlm's own
generate (tests/test_vision*.py): their mlx-vlm class has ``get_input_embeddings(input_ids,
pixel_values)`` and their language model places tokens by one position index, so it decodes in
the shared batch with mlx-lm's caches. Other checkpoints with a ``vision_config`` that mlx-lm
reads (Gemma 3, Mistral 3, Qwen 3.5...) stay served as text models, as before; images sent to
them get a 400. Multi-axis positions (Qwen2-VL's M-RoPE) need more than this adapter.
"""
from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

logger = logging.getLogger("omlx.engine")

IMAGE_FAMILIES = ("llava",)  # model_types served with images (see the module docstring)


def is_vision_config(config: dict) -> bool:
    """A config.json of a vision-language model (it describes a vision tower)."""
    return isinstance(config.get("vision_config"), dict)


def reads_images(config: dict) -> bool:
    """Served through this module, with images."""
    return is_vision_config(config) and config.get("model_type") in IMAGE_FAMILIES


def unsupported_reason(config: dict) -> Optional[str]:
    """Why the VLM of ``config`` cannot be served with images; None if it can."""
    model_type = config.get("model_type")
    if model_type not in IMAGE_FAMILIES:
        return (f"vision model_type {model_type!r} is not served yet (images are served for "
                f"{', '.join(IMAGE_FAMILIES)}) and the installed mlx-lm does not read it as text")
    try:
        from mlx_vlm.utils import get_model_and_args

        get_model_and_args(config)
    except Exception:
        return f"vision model_type {model_type!r} is not supported by the installed mlx-vlm"
    return None


class TextModel(nn.Module):
    """The language model of a VLM with mlx-lm's call signature; its only child is the language
    model, so ``parameters()`` and the head gate see exactly the text path."""

    def __init__(self, language_model: nn.Module):
        super().__init__()
        self.language_model = language_model

    @property
    def layers(self):
        return self.language_model.layers

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: Optional[mx.array] = None):
        out = self.language_model(inputs, inputs_embeds=input_embeddings, cache=cache)
        return getattr(out, "logits", out)


class VisionModel:
    """The mlx-vlm model and the Hugging Face processor of a folder."""

    def __init__(self, vlm: nn.Module, processor, config: dict):
        self.vlm = vlm
        self.processor = processor
        self.config = config
        self.image_token_id = self.token_id(config)

    @staticmethod
    def token_id(config: dict) -> int:
        """The id of the image placeholder token in the prompt."""
        return int(config.get("image_token_index", config.get("image_token_id", -1)))

    def prompt_embeddings(self, input_ids, pixel_values) -> mx.array:
        """[L, D] input embeddings of a prompt: token embeddings with the image features in
        the image tokens' places (the model's own merge)."""
        ids = mx.array([list(input_ids)])
        features = self.vlm.get_input_embeddings(ids, mx.array(pixel_values))
        return getattr(features, "inputs_embeds", features)[0]

    def token_embeddings(self, token_ids) -> mx.array:
        return self.vlm.language_model.model.embed_tokens(mx.array(list(token_ids)))


class ProcessorOnly:
    """The processor side of a VisionModel, without the weights (token counts in the API
    process); processors are cached per folder."""

    def __init__(self, path: Path, config: dict):
        self.processor = _processor(str(path), (Path(path) / "config.json").stat().st_mtime_ns)
        self.image_token_id = VisionModel.token_id(config)


@functools.lru_cache(maxsize=4)
def _processor(path: str, _mtime: int):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(path)


def load_vision(path: Path, dtype_name: Optional[str]):
    """(TextModel, VisionModel, config) of the folder; raises whatever mlx-vlm or transformers
    raise for a broken one (the caller words it)."""
    from mlx_vlm.utils import load_model as vlm_load_model
    from transformers import AutoProcessor

    config = json.loads((Path(path) / "config.json").read_text())
    reason = unsupported_reason(config)
    if reason is not None:
        raise ValueError(reason)
    vlm = vlm_load_model(Path(path))
    if dtype_name is not None:
        target = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}[dtype_name]
        vlm.set_dtype(target, predicate=lambda t: mx.issubdtype(t, mx.floating))
    mx.eval(vlm.parameters())
    processor = AutoProcessor.from_pretrained(str(path))
    return TextModel(vlm.language_model), VisionModel(vlm, processor, config), config
