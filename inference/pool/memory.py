"""What a model will cost in memory before it is loaded, the limits it must fit under, and what
the process uses now.

A model's estimate is what its engine may hold at most, so that the sum over loaded models stays
under ``--max-model-memory`` whatever requests arrive:

    weights  every tensor of the *.safetensors files (read from their headers, nothing loaded),
             floating tensors at the dtype the engine casts them to (float32 on CPUs), the
             others (quantized uint32 packs) as stored;
    kv       the KV cache of running requests: min(the scheduler's KV capacity in tokens,
             max_concurrent_requests x (context length + 256)) x KV bytes per token
             (2 x attention layers x KV heads x head dim x dtype size, from config.json:
             ``attention_layers``, the layers the engine keeps KV for; with ``kv_bits`` the
             attention layers count kv_bits / 8 bytes a channel plus a scale and a bias
             of the dtype per ``kv_group_size`` channels, as ``mx.quantize`` stores them); the
             256 covers the cache's allocation step;
    hot      the hot tier of the prefix cache (hot_cache_max_size; 0 with caching off).

The cold tier lives on disk and costs no RAM.

An embedding or reranker model (``estimate_encoder``) holds no KV cache: its estimate is the
weights plus the work memory of its largest batch (``kv_bytes`` then counts that): the hidden
states of ``MAX_BATCH_TOKENS`` tokens through one layer and the attention scores of a batch of
full-length sequences.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Optional

from cache.sizes import parse_size, total_ram

GiB = 2**30
PROCESS_RESERVE_BYTES = 8 * GiB  # --max-process-memory auto: RAM minus this (at least half of RAM)
KV_ALLOCATION_STEP = 256
_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
_TARGET_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
_TORCH_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_bytes: int
    hot_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.hot_bytes

    def to_dict(self) -> dict:
        return dict(asdict(self), total_bytes=self.total_bytes)


def estimate(weight_files: Iterable[Path], config: dict, engine_settings: dict) -> MemoryEstimate:
    """The most memory an engine over these weights may use (see the module docstring)."""
    from inference.engine import EngineConfig
    from inference.platform import default_dtype

    engine = EngineConfig(**engine_settings)
    dtype = engine.dtype or default_dtype()
    weights = sum(_tensor_bytes(path, dtype) for path in weight_files)
    per_token = kv_bytes_per_token(config, dtype, engine.kv_quant)
    if engine.max_kv_tokens is not None:
        capacity = engine.max_kv_tokens
    else:
        capacity = max(1024, int(total_ram() * engine.kv_cache_memory_fraction) // per_token)
    context = _text_config(config).get("max_position_embeddings")
    if isinstance(context, int) and context > 0:
        capacity = min(capacity, engine.max_concurrent_requests * (context + KV_ALLOCATION_STEP))
    hot = parse_size(engine.hot_cache_max_size, "hot_cache_max_size") if engine.prefix_cache else 0
    return MemoryEstimate(weights, capacity * per_token, hot)


def attention_layers(text: dict) -> int:
    """Layers that keep KV per token, from a (text) config: hybrid models say which layers are
    attention (``layer_types`` / ``layers_block_type``: full or sliding attention, not linear
    attention or Mamba; Nemotron-H's ``hybrid_override_pattern``: "*"; Qwen3-Next's
    ``full_attention_interval``). A sliding window counts as if it grew, as the engine counts
    it. The recurrent layers' state is per sequence, not per token, and is not counted here."""
    kinds = text.get("layer_types") or text.get("layers_block_type")
    if isinstance(kinds, list) and kinds:
        return sum(1 for k in kinds if isinstance(k, str) and "attention" in k and "linear" not in k)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*")
    layers = text.get("num_hidden_layers") or 1
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1:
        return layers // interval
    return layers


def estimate_encoder(weight_files: Iterable[Path], config: dict, engine_settings: dict) -> MemoryEstimate:
    """The most memory an embedding or reranker engine may use (see the module docstring)."""
    from inference.embedding.encoder_model import MAX_TOKENS
    from inference.embedding.engine import MAX_BATCH_TOKENS
    from inference.platform import default_dtype

    dtype = engine_settings.get("dtype") or default_dtype()
    weights = sum(_tensor_bytes(path, dtype) for path in weight_files)
    text = _text_config(config)
    hidden = text.get("hidden_size") or 1024
    width = max(hidden, text.get("intermediate_size") or 4 * hidden)
    heads = text.get("num_attention_heads") or 16
    length = min(text.get("max_position_embeddings") or 512, MAX_TOKENS)
    size = _TARGET_SIZE.get(dtype, 4)
    work = MAX_BATCH_TOKENS * (4 * hidden + 2 * width) * size + MAX_BATCH_TOKENS * heads * length * 4
    return MemoryEstimate(weights, work, 0)


def kv_bytes_per_token(config: dict, dtype: Optional[str], quant=None) -> int:
    """KV bytes per token of a model's attention layers; ``quant`` (a ``KVQuant``, or None):
    every attention layer, full or sliding-window, quantized."""
    text = _text_config(config)
    heads = text.get("num_attention_heads") or 1
    layers = attention_layers(text)
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (text.get("hidden_size") or 0) // heads or 128
    size = _TARGET_SIZE.get(dtype) or _TORCH_SIZE.get(str(config.get("torch_dtype")), 2)
    if quant is None:
        return max(1, 2 * layers * kv_heads * head_dim * size)
    return max(1, int(layers * 2 * kv_heads * head_dim * quant.bytes_per_value(size)))


def parse_limit(value, name: str, auto: Optional[int] = None) -> Optional[int]:
    """Bytes for a memory limit: a size ("32GB", "80%", 1073741824), "auto" (``auto``) or
    "disabled" (None). ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("disabled", "off", "none"):
        return None
    if isinstance(value, str) and value.strip().lower() == "auto":
        if auto is None:
            raise ValueError(f"{name}={value!r}: 'auto' is not accepted here")
        return auto
    limit = parse_size(value, name)
    if limit <= 0:
        raise ValueError(f"{name}={value!r}: must be > 0 (or 'disabled')")
    return limit


def auto_process_limit() -> int:
    ram = total_ram()
    return max(ram // 2, ram - PROCESS_RESERVE_BYTES)


def process_rss() -> Optional[int]:
    """Resident memory of this process in bytes, or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["ps", "-o", "rss=", "-p", str(os.getpid())], capture_output=True, text=True, timeout=5
            ).stdout
            return int(out.strip()) * 1024
        except (OSError, ValueError, subprocess.SubprocessError):
            return None
    return None


def format_bytes(n: Optional[int]) -> str:
    if n is None:
        return "unlimited"
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _tensor_bytes(path: Path, dtype: Optional[str]) -> int:
    """Bytes of the tensors in one safetensors file once loaded (floating ones cast to ``dtype``);
    the file size when the header cannot be read."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
    except (OSError, ValueError, struct.error):
        return _file_size(path)
    total = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        count = 1
        for dim in info.get("shape", []):
            count *= int(dim)
        stored = info.get("dtype", "F32")
        floating = stored.startswith(("F", "BF"))
        size = _TARGET_SIZE[dtype] if floating and dtype in _TARGET_SIZE else _ITEMSIZE.get(stored, 4)
        total += count * size
    return total


def _text_config(config: dict) -> dict:
    text = config.get("text_config")
    return dict(config, **text) if isinstance(text, dict) else config


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
