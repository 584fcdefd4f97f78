"""Loading a model folder (MLX or Hugging Face format) with mlx-lm, with errors that say why.

config.json goes through ``config_compat.for_mlx_lm`` first: transformers 5's keys become the ones
mlx-lm reads, and a folder whose math mlx-lm would get wrong is refused."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.utils import _get_classes, load_model as mlx_load_model, load_tokenizer

from cache.layout import CacheLayout
from inference import platform
from inference.vision import model as vision_model

from . import cache_io, config_compat, quantized_kv, sink_attention, vlm_config_compat, weight_compat
from .kv_quant import KVQuant

logger = logging.getLogger("omlx.engine")


class ModelLoadError(ValueError):
    """A model folder that cannot be served; the message says what is wrong."""


@dataclass
class LoadedModel:
    path: Path
    model: nn.Module
    tokenizer: Any  # mlx_lm TokenizerWrapper
    config: dict
    model_type: str
    dtype: str
    vocab_size: int
    context_length: Optional[int]
    kv_bytes_per_token: int  # attention layers (a sliding window counted as if it grew)
    cache_layout: Optional[CacheLayout]  # per-layer cache kinds; None: cannot be split into blocks
    state_bytes: int = 0  # recurrent state of one sequence, whatever its length
    vision: Any = None  # inference.vision.model.VisionModel of a vision-language model, else None
    kv_quant: Optional[KVQuant] = None  # attention KV quantized (inference.engine.quantized_kv)
    head_dims: frozenset = frozenset()  # the key and value dims of the attention layers

    def new_cache(self) -> list:
        """A fresh cache list for one sequence (quantized attention layers with kv_quant)."""
        return quantized_kv.make_cache(self.model, self.kv_quant)

    @property
    def kv_layout(self) -> Optional[str]:
        """The layout's descriptor (part of the model fingerprint), or None."""
        return self.cache_layout.descriptor if self.cache_layout is not None else None


_DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


def load_model(
    path,
    dtype: Optional[str] = None,
    kv_quant: Optional[KVQuant] = None,
    shard: Optional[Callable[[nn.Module], None]] = None,
) -> LoadedModel:
    """Load the model and tokenizer in ``path``; cast floating weights to ``dtype``
    (None: the platform default, see inference.platform.default_dtype); with ``kv_quant`` its
    attention layers (full and sliding-window) keep quantized KV (not for vision models: they
    keep float KV).
    ``shard``: called on the model before any weight is read (inference.distributed: this
    rank's layers only); it raises ValueError for a model it cannot split."""
    path = Path(path).expanduser()
    config = _read_config(path)
    model_type = config["model_type"]
    if vision_model.reads_images(config, path):
        if kv_quant is not None:
            logger.warning("%s: a vision model keeps float KV (kv_bits applies to text models)", path)
        return _load_vision(path, config, dtype)
    try:
        _get_classes(config)
    except ValueError:
        raise ModelLoadError(
            f"{path}: model_type {model_type!r} is not supported by the installed mlx-lm"
        ) from None
    if not list(path.glob("model*.safetensors")):
        raise ModelLoadError(f"{path}: no weights (model*.safetensors) in the folder")
    if not any(
        (path / name).exists() for name in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
    ):
        raise ModelLoadError(f"{path}: no tokenizer (tokenizer.json or tokenizer.model) in the folder")
    try:
        model, config = mlx_load_model(
            path, lazy=shard is not None, model_config=config, get_model_classes=weight_compat.model_classes
        )
    except Exception as exc:  # mlx-lm raises ValueError, KeyError, OSError... for broken folders
        raise ModelLoadError(f"{path}: cannot load the weights: {exc}") from exc
    if shard is not None:
        try:
            shard(model)
        except ValueError as exc:
            raise ModelLoadError(f"{path}: {exc}") from None
        mx.eval(model.parameters())
    try:
        tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot load the tokenizer: {exc}") from exc

    dtype = dtype or platform.default_dtype()
    if dtype is not None:
        target = _DTYPES[dtype]
        model.set_dtype(target, predicate=lambda t: mx.issubdtype(t, mx.floating))
        mx.eval(model.parameters())
    dtype_name = str(_first_float_dtype(model)).replace("mlx.core.", "")

    if kv_quant is not None:
        sink_attention.install(model)  # quantized KV with attention sinks (gpt-oss)
    vocab_size, kv_bytes, layout, state, dims = _probe(model, path, kv_quant)
    text_config = config.get("text_config", {})
    context = config.get("max_position_embeddings") or text_config.get("max_position_embeddings")
    logger.info(
        "loaded %s (%s, %s, vocab %d, %d KV bytes/token)", path, model_type, dtype_name, vocab_size, kv_bytes
    )
    return LoadedModel(
        path,
        model,
        tokenizer,
        config,
        model_type,
        dtype_name,
        vocab_size,
        context,
        kv_bytes,
        layout,
        state,
        kv_quant=kv_quant,
        head_dims=dims,
    )


def _load_vision(path: Path, config: dict, dtype: Optional[str]) -> LoadedModel:
    """A vision-language model (inference.vision.model): the engine runs its language model."""
    reason = vision_model.unsupported_reason(config)
    if reason is not None:
        raise ModelLoadError(f"{path}: {reason}")
    dtype = dtype or platform.default_dtype()
    try:
        model, vision, config = vision_model.load_vision(path, dtype)
    except Exception as exc:  # mlx-vlm and transformers raise anything for broken folders
        raise ModelLoadError(f"{path}: cannot load the vision model: {exc}") from exc
    try:
        tokenizer = load_tokenizer(
            path,
            eos_token_ids=config.get("eos_token_id") or config.get("text_config", {}).get("eos_token_id"),
        )
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot load the tokenizer: {exc}") from exc
    dtype_name = str(_first_float_dtype(model)).replace("mlx.core.", "")
    vocab_size, kv_bytes, layout, state, dims = _probe(model, path)
    context = config.get("text_config", {}).get("max_position_embeddings")
    logger.info("loaded vision model %s (%s, %s)", path, config["model_type"], dtype_name)
    return LoadedModel(
        path,
        model,
        tokenizer,
        config,
        config["model_type"],
        dtype_name,
        vocab_size,
        context,
        kv_bytes,
        layout,
        state,
        vision=vision,
        head_dims=dims,
    )


def _read_config(path: Path) -> dict:
    if not path.is_dir():
        raise ModelLoadError(f"{path}: not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{path}: no config.json, so this is not a model folder")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{config_file}: not valid JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ModelLoadError(f'{config_file}: has no "model_type"')
    try:
        if vision_model.reads_images(config, path):  # read by mlx-vlm
            return vlm_config_compat.for_mlx_vlm(config)
        return config_compat.for_mlx_lm(config)
    except config_compat.ConfigError as exc:
        raise ModelLoadError(f"{path}: {exc}") from None


def _first_float_dtype(model: nn.Module):
    from mlx.utils import tree_flatten

    for _, value in tree_flatten(model.parameters()):
        if mx.issubdtype(value.dtype, mx.floating):
            return value.dtype
    return mx.float32


def _probe(model: nn.Module, path: Path, kv_quant: Optional[KVQuant] = None):
    """Vocab size, attention KV bytes per token, cache layout, recurrent state bytes per
    sequence and the attention layers' head dims, from one forward pass of one token (with
    ``kv_quant``, over quantized caches, after a float pass that checks the group size divides
    every head dimension)."""
    if kv_quant is not None:
        float_cache = quantized_kv.make_cache(model, None)
        model(mx.array([[0]]), cache=float_cache)
        dims = cache_io.attention_dims(float_cache)
        if any(d % kv_quant.group_size for d in dims):
            raise ModelLoadError(
                f"{path}: kv_group_size={kv_quant.group_size} does not divide its head dimension "
                f"({', '.join(map(str, sorted(dims)))}); use a group size that does, or float KV"
            )
    cache = quantized_kv.make_cache(model, kv_quant)
    if not cache_io.is_batchable(cache):
        raise ModelLoadError(f"{path}: its KV cache ({type(cache[0]).__name__}) cannot be batched")
    try:
        logits = model(mx.array([[0]]), cache=cache)
        mx.eval(logits, [c.state for c in cache])
    except Exception as exc:
        raise ModelLoadError(f"{path}: a test forward pass failed: {exc}") from exc
    kv_bytes = cache_io.attention_bytes_per_token(cache)
    layout, dims = cache_io.layout_of(cache), frozenset(cache_io.attention_dims(cache))
    return logits.shape[-1], max(1, kv_bytes), layout, cache_io.state_bytes(cache), dims
