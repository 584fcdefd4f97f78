"""A vision-language model folder loaded with mlx-vlm, served by the text engine.

The engine runs ``TextModel``: the VLM's language model behind mlx-lm's calling convention
(``model(tokens, cache=...)`` -> logits, ``input_embeddings=`` for a prefill that carries image
features), so the decode batch, the block cache, the head gate and the probes work as for any
mlx-lm model. ``VisionModel`` holds the whole mlx-vlm model (vision tower and projector) and the
processor; it turns a prompt's token ids and pixels into input embeddings, on the engine thread.

Served with images: the families of ``IMAGE_FAMILIES``, checked end to end against mlx-vlm's own
generate (tests/*/test_vision*.py): their mlx-vlm class has ``get_input_embeddings(input_ids,
pixel_values, **extras)`` and their language model decodes in the shared batch with mlx-lm's
caches (Gemma 3's sliding-window layers get mlx-lm's rotating caches: ``TextModel.make_cache``).
Other checkpoints with a ``vision_config`` that mlx-lm reads (Pixtral, Qwen 3.5...) stay
served as text models, as before; images sent to them get a 400.

Multi-axis positions (``MROPE_FAMILIES``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL). Their rotary
positions are three (time, height, width): an image's tokens take grid positions, and every
token after an image is shifted by the prompt's *rope delta* (max position + 1 - length), which
depends on the image's grid. mlx-vlm keeps that delta and the prompt's position ids on its
language model object (``_rope_deltas``, ``_position_ids``), i.e. for one sequence at a time;
the engine decodes many sequences in one batch and restores KV from the block cache, so
``MRopeTextModel`` never lets mlx-vlm's language model derive positions: it calls the decoder
stack with explicit ``position_ids``. A request carries its own positions
(``inference.vision.prompt.VisionPrompt``: computed from its whole prompt and image grids, sliced
for each range it computes, and its delta for the tokens after the prompt); text-only requests
and a batch's default are the plain ``cache offset + i`` on all three axes, plus each row's
``position_deltas``. Invariant: the positions of a token depend only on the request's prompt
(key ids: text and image content and grid) and its index, never on what ran before on the model,
so KV restored from the block cache sits at the positions it was computed at.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import tempfile
from pathlib import Path
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

logger = logging.getLogger("omlx.engine")

IMAGE_FAMILIES = (
    "llava",
    "gemma3",
    "mistral3",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
)  # served with images (module docstring)
MROPE_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")  # three-axis rotary positions


def is_vision_config(config: dict) -> bool:
    """A config.json of a vision-language model (it describes a vision tower)."""
    return isinstance(config.get("vision_config"), dict)


def reads_images(config: dict, path: Optional[Path] = None) -> bool:
    """Served through this module, with images. With the folder's ``path``: only if its weights
    hold a vision tower (mlx-lm's conversion of a VLM keeps ``vision_config`` but drops the
    tower; such a folder is a text model, served by mlx-lm as before)."""
    if not (is_vision_config(config) and config.get("model_type") in IMAGE_FAMILIES):
        return False
    return path is None or has_vision_weights(Path(path))


_VISION_PREFIXES = ("vision_tower.", "visual.", "vision_model.", "model.visual.", "model.vision_tower.")


def has_vision_weights(path: Path) -> bool:
    """Whether the folder's weight names include a vision tower (the Hub's and mlx-vlm's names
    of the families served). True when it cannot tell (no weights, unreadable headers): loading
    then says what is wrong."""
    files = sorted(path.glob("model*.safetensors"))
    index = path / "model.safetensors.index.json"
    stamps = tuple(
        (f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files + ([index] if index.is_file() else [])
    )
    return _has_vision_weights(str(path), stamps)


@functools.lru_cache(maxsize=256)
def _has_vision_weights(path: str, stamps: tuple) -> bool:
    import struct

    folder = Path(path)
    names = []
    try:
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            names = list(json.loads(index.read_text()).get("weight_map", {}))
        else:
            for name, _, _ in stamps:
                with open(folder / name, "rb") as f:
                    size = struct.unpack("<Q", f.read(8))[0]
                    names += list(json.loads(f.read(size)))
    except (OSError, ValueError, struct.error):
        return True
    if not names:
        return True
    return any(n.startswith(_VISION_PREFIXES) for n in names)


def unsupported_reason(config: dict) -> Optional[str]:
    """Why the VLM of ``config`` cannot be served with images; None if it can."""
    model_type = config.get("model_type")
    if model_type not in IMAGE_FAMILIES:
        return (
            f"vision model_type {model_type!r} is not served yet (images are served for "
            f"{', '.join(IMAGE_FAMILIES)}) and the installed mlx-lm does not read it as text"
        )
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

    def make_cache(self):
        """mlx-lm's caches of the kinds the language model asks for (mlx-vlm's own classes are
        twins of mlx-lm's, but the engine's batching and block cache work on mlx-lm's): a full
        KV cache per layer, or a rotating one where the model has sliding windows (Gemma 3)."""
        from mlx_lm.models.cache import KVCache, RotatingKVCache

        if not hasattr(self.language_model, "make_cache"):
            return [KVCache() for _ in self.layers]
        caches = []
        for c in self.language_model.make_cache():
            if type(c).__name__ == "RotatingKVCache":
                caches.append(RotatingKVCache(max_size=c.max_size, keep=c.keep))
            elif type(c).__name__ == "KVCache":
                caches.append(KVCache())
            else:  # a kind the engine would not batch: the model's own (refused at load)
                caches.append(c)
        return caches

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: Optional[mx.array] = None):
        out = self.language_model(inputs, inputs_embeds=input_embeddings, cache=cache)
        return getattr(out, "logits", out)


class MRopeTextModel(TextModel):
    """The language model of a Qwen-VL family with explicit three-axis positions (see the
    module docstring): ``position_ids`` [3, B, L] when the caller has them (a request with
    images), else ``cache offset + i`` per row, plus ``position_deltas`` [B] (each decode row's
    rope delta). ``visual_pos_masks`` / ``deepstack_visual_embeds``: Qwen3-VL's image features
    added to the first layers' hidden states at image positions, for the range computed."""

    def __call__(
        self,
        inputs: mx.array,
        cache=None,
        input_embeddings: Optional[mx.array] = None,
        position_ids: Optional[mx.array] = None,
        position_deltas: Optional[mx.array] = None,
        **deepstack,
    ):
        if position_ids is None:
            position_ids = default_positions(inputs, cache, position_deltas)
        lm = self.language_model
        h = lm.model(
            inputs, inputs_embeds=input_embeddings, cache=cache, position_ids=position_ids, **deepstack
        )
        if "lm_head" in lm:
            return lm.lm_head(h)
        return lm.model.embed_tokens.as_linear(h)


def default_positions(inputs: mx.array, cache, deltas: Optional[mx.array] = None) -> mx.array:
    """[3, B, L] positions ``offset + i (+ delta)`` of the next L tokens of each row of ``cache``
    (a plain cache: one offset; an mlx-lm batch cache: one per row)."""
    batch, length = inputs.shape[0], inputs.shape[1]
    offset = cache[0].offset if cache else 0
    base = mx.array(offset).reshape(-1, 1) if isinstance(offset, mx.array) else mx.full((1, 1), offset)
    if deltas is not None:
        base = base + deltas.reshape(-1, 1)
    positions = mx.broadcast_to(base + mx.arange(length)[None], (batch, length))
    return mx.broadcast_to(positions[None], (3, batch, length))


class VisionModel:
    """The mlx-vlm model and the processor of a folder (mlx-vlm's own for the families it
    ships one for, e.g. Qwen-VL's: the same pixels as its ``generate``)."""

    def __init__(self, vlm: nn.Module, processor, config: dict):
        self.vlm = vlm
        self.processor = processor
        self.config = config
        self.image_token_id = self.token_id(config)
        self.merge_size = merge_size(config)
        self.size_unit = size_unit(config)
        self.mrope = config.get("model_type") in MROPE_FAMILIES

    @staticmethod
    def token_id(config: dict) -> int:
        """The id of the image placeholder token in the prompt."""
        return int(config.get("image_token_index", config.get("image_token_id", -1)))

    def prompt_embeddings(self, input_ids, pixel_values, extras=None):
        """([L, D] input embeddings of a prompt: token embeddings with the image features in
        the image tokens' places (the model's own merge), Qwen3-VL's deepstack features
        [layers, image tokens, D] or None)."""
        ids = mx.array([list(input_ids)])
        kwargs = {k: mx.array(v) for k, v in (extras or {}).items()}
        if "mask" in inspect.signature(self.vlm.get_input_embeddings).parameters:
            kwargs["mask"] = mx.ones(ids.shape, dtype=mx.int32)  # Gemma 3 builds a 4-D mask from it
        features = self.vlm.get_input_embeddings(ids, mx.array(pixel_values), **kwargs)
        deepstack = getattr(features, "deepstack_visual_embeds", None)
        if isinstance(deepstack, (list, tuple)):
            deepstack = mx.stack(deepstack)
        return getattr(features, "inputs_embeds", features)[0], deepstack

    def prompt_positions(self, input_ids, extras=None):
        """M-RoPE: ([3, L] positions of the prompt's tokens, rope delta) from the model's own
        ``get_rope_index`` on the whole prompt and its image grids."""
        grid = (extras or {}).get("image_grid_thw")
        positions, delta = self.vlm.language_model.get_rope_index(
            mx.array([list(input_ids)]), None if grid is None else mx.array(grid)
        )
        return positions[:, 0, :], int(mx.array(delta).reshape(-1)[0].item())

    def token_embeddings(self, token_ids) -> mx.array:
        return self.vlm.language_model.model.embed_tokens(mx.array(list(token_ids)))


def merge_size(config: dict) -> int:
    """Qwen-VL's spatial merge: merge**2 patches make one image token."""
    return int((config.get("vision_config") or {}).get("spatial_merge_size", 1))


def size_unit(config: dict) -> int:
    """Mistral 3 (Pixtral tower): one image token per (patch * merge)-pixel square of the
    picture as the processor sized it; 0 for the other families."""
    if config.get("model_type") != "mistral3":
        return 0
    return int((config.get("vision_config") or {}).get("patch_size", 14)) * int(
        config.get("spatial_merge_size", 1)
    )


class ProcessorOnly:
    """The processor side of a VisionModel, without the weights (token counts in the API
    process); processors are cached per folder."""

    def __init__(self, path: Path, config: dict):
        self.processor = _processor(
            str(path), (Path(path) / "config.json").stat().st_mtime_ns, config.get("model_type")
        )
        self.image_token_id = VisionModel.token_id(config)
        self.merge_size = merge_size(config)
        self.size_unit = size_unit(config)
        self.mrope = config.get("model_type") in MROPE_FAMILIES


@functools.lru_cache(maxsize=4)
def _processor(path: str, _mtime: int, model_type: Optional[str] = None):
    return load_processor(path, model_type)


def load_processor(path: str, model_type: Optional[str]):
    """The folder's processor as mlx-vlm loads it (``mlx_vlm.utils.load_processor``): importing
    the family's mlx-vlm module first installs mlx-vlm's own processor class for it (numpy, no
    torchvision) where it has one. Without mlx-vlm's detokenizer: the processor only builds inputs."""
    import importlib

    from mlx_vlm.utils import load_processor as vlm_load_processor

    if model_type:
        try:
            importlib.import_module(f"mlx_vlm.models.{model_type}")
        except ImportError:  # a family without an mlx-vlm module: transformers' processor
            pass
    return vlm_load_processor(path, add_detokenizer=False)


@contextlib.contextmanager
def _as_written_for_mlx_vlm(path: Path, config: Optional[dict]):
    """``path`` itself, or (``config``: the mapped config.json) a temporary view of it for mlx-vlm,
    which reads config.json from the folder it loads: links to every other file, and ``config``."""
    if config is None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="omlx-vlm-") as tmp:
        view = Path(tmp)
        for entry in path.iterdir():
            if entry.name != "config.json":
                (view / entry.name).symlink_to(entry.resolve())
        (view / "config.json").write_text(json.dumps(config))
        yield view


def load_vision(path: Path, dtype_name: Optional[str]):
    """(TextModel, VisionModel, config) of the folder; raises whatever mlx-vlm or transformers
    raise for a broken one (the caller words it)."""
    from mlx_vlm.utils import load_model as vlm_load_model

    from inference.engine.vlm_config_compat import for_mlx_vlm

    written = json.loads((Path(path) / "config.json").read_text())
    config = for_mlx_vlm(written)  # transformers 5's keys as mlx-vlm reads them
    reason = unsupported_reason(config)
    if reason is not None:
        raise ValueError(reason)
    with _as_written_for_mlx_vlm(Path(path), config if config != written else None) as folder:
        vlm = vlm_load_model(folder)
        if dtype_name is not None:
            target = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}[dtype_name]
            vlm.set_dtype(target, predicate=lambda t: mx.issubdtype(t, mx.floating))
        mx.eval(vlm.parameters())
    processor = load_processor(str(path), config.get("model_type"))
    wrapper = MRopeTextModel if config.get("model_type") in MROPE_FAMILIES else TextModel
    return wrapper(vlm.language_model), VisionModel(vlm, processor, config), config
