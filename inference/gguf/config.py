"""config.json from a GGUF file's ``{arch}.*`` keys, as transformers would write it for the family
(with the transformers 4 keys mlx-lm reads: ``rope_theta``, ``rope_scaling``).

Architectures: llama, qwen2, qwen3, gemma3 (written as ``gemma3_text``, the text-only model). Any
other is refused with its name. A key this module does not understand and that changes the math
(per-layer head counts, a partial rotary dimension, an unknown RoPE scaling, a ``rope_freqs``
tensor that is not llama 3's scaling) is refused too: a model is imported exactly or not at all.
"""

from __future__ import annotations

import math
from typing import Any, Dict

import mlx.core as mx
import numpy as np

from .reader import GgufFile, GgufImportError

# GGUF architecture -> (model_type, transformers class, RoPE base when the file has none).
ARCHITECTURES = {
    "llama": ("llama", "LlamaForCausalLM", 10000.0),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", 10000.0),
    "qwen3": ("qwen3", "Qwen3ForCausalLM", 10000.0),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM", 1_000_000.0),
}
# llama.cpp's default for gemma3 GGUFs without a pattern key: every 6th layer attends globally.
GEMMA3_PATTERN = 6


def build_config(gguf: GgufFile) -> Dict[str, Any]:
    arch = gguf.architecture
    if arch not in ARCHITECTURES:
        raise GgufImportError(
            f"{gguf.path.name}: GGUF architecture {arch!r} is not supported; "
            f"omlx imports {', '.join(ARCHITECTURES)}"
        )
    model_type, cls, default_base = ARCHITECTURES[arch]
    hidden = int(gguf.require("embedding_length"))
    heads = _uniform(gguf, "attention.head_count")
    kv_heads = _uniform(gguf, "attention.head_count_kv", heads)
    head_dim = int(gguf.key("attention.key_length", hidden // heads))
    if int(gguf.key("attention.value_length", head_dim)) != head_dim:
        raise GgufImportError(f"{gguf.path.name}: key and value head sizes differ; not supported")
    rotary = int(gguf.key("rope.dimension_count", head_dim))
    if rotary != head_dim:
        raise GgufImportError(
            f"{gguf.path.name}: RoPE over {rotary} of {head_dim} head dimensions is not supported"
        )
    embed = gguf.tensors["token_embd.weight"]
    config: Dict[str, Any] = {
        "architectures": [cls],
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(gguf.require("block_count")),
        "intermediate_size": _uniform(gguf, "feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": float(gguf.require("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(gguf.key("rope.freq_base", default_base)),
        "max_position_embeddings": int(gguf.key("context_length", 4096)),
        "vocab_size": int(gguf.key("vocab_size", embed.shape[0])),
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "torch_dtype": "float32",
    }
    scaling = _rope_scaling(gguf)
    if "rope_freqs.weight" in gguf.tensors:
        scaling = _llama3_rope(gguf, config["rope_theta"], head_dim)
    if scaling is not None:
        config["rope_scaling"] = scaling
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        value = gguf.metadata.get(f"tokenizer.ggml.{name}")
        if value is not None:
            config[key] = int(value)
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in gguf.tensors
        config["mlp_bias"] = False
        config["hidden_act"] = "silu"
    elif arch == "gemma3":
        config.update(_gemma3(gguf, config))
    else:
        config["hidden_act"] = "silu"
    return config


def _uniform(gguf: GgufFile, name: str, default: Any = None) -> int:
    value = gguf.key(name, default)
    if value is None:
        return int(gguf.require(name))
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise GgufImportError(f"{gguf.path.name}: {gguf.architecture}.{name} differs between layers")
        value = value[0]
    return int(value)


def _rope_scaling(gguf: GgufFile):
    kind = gguf.key("rope.scaling.type")
    if kind in (None, "none"):
        return None
    factor = float(gguf.require("rope.scaling.factor"))
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind == "yarn":
        return {
            "rope_type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": int(gguf.require("rope.scaling.original_context_length")),
        }
    raise GgufImportError(f"{gguf.path.name}: RoPE scaling {kind!r} is not supported")


# Llama 3.x's RoPE scaling parameters besides its factor (the same in 3.1, 3.2 and 3.3); a GGUF
# file has only the per-frequency factors they produce (the rope_freqs tensor).
_LLAMA3 = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _llama3_rope(gguf: GgufFile, base: float, head_dim: int) -> Dict[str, Any]:
    """rope_scaling of type llama3 whose frequencies are exactly the file's rope_freqs (llama.cpp
    writes one divisor per rotary frequency), or GgufImportError."""
    found = np.array(gguf.tensors["rope_freqs.weight"].astype(mx.float32), dtype=np.float64)
    params = dict(_LLAMA3, factor=float(found.max()))
    if found.shape != (head_dim // 2,) or not np.allclose(
        _llama3_factors(base, head_dim, params), found, rtol=1e-5
    ):
        raise GgufImportError(
            f"{gguf.path.name}: its per-frequency RoPE factors (rope_freqs) are not llama 3's scaling "
            f"{params}; not supported"
        )
    return {"rope_type": "llama3", **params}


def _llama3_factors(base: float, head_dim: int, params: Dict[str, Any]) -> np.ndarray:
    """What llama.cpp's converter writes as rope_freqs for these llama3 scaling parameters."""
    old = params["original_max_position_embeddings"]
    low, high = old / params["low_freq_factor"], old / params["high_freq_factor"]
    factors = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < high:
            factors.append(1.0)
        elif wavelen > low:
            factors.append(params["factor"])
        else:
            smooth = (old / wavelen - params["low_freq_factor"]) / (
                params["high_freq_factor"] - params["low_freq_factor"]
            )
            factors.append(1 / ((1 - smooth) / params["factor"] + smooth))
    return np.array(factors)


def _gemma3(gguf: GgufFile, config: Dict[str, Any]) -> Dict[str, Any]:
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    # llama.cpp scales queries by 1/sqrt(head_dim), except gemma3 27B (62 layers): hidden / heads
    scalar = hidden // heads if config["num_hidden_layers"] == 62 else config["head_dim"]
    pattern = gguf.key("attention.sliding_window_pattern", GEMMA3_PATTERN)
    if isinstance(pattern, list):  # one flag per layer (true: sliding), as newer llama.cpp writes
        full = [i for i, sliding in enumerate(pattern) if not sliding]
        period = full[0] + 1 if full else 0
        if not full or any(bool(s) != ((i + 1) % period != 0) for i, s in enumerate(pattern)):
            raise GgufImportError(f"{gguf.path.name}: gemma3's sliding-window layers have no period")
        pattern = period
    return {
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": scalar,
        "sliding_window": int(gguf.require("attention.sliding_window")),
        "sliding_window_pattern": int(pattern),
        "rope_local_base_freq": 10000.0,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    }
