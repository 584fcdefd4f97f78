"""GGUF tensors renamed to mlx-lm's weight names, with llama.cpp's conversions undone.

- llama: llama.cpp's converter permutes the rows of ``attn_q`` and ``attn_k`` (per head, the two
  rotary halves interleaved) for its interleaved RoPE; mlx-lm's llama rotates halves, so the
  permutation is undone, as transformers' GGUF loader does. Only rows move, so a quantized
  tensor's packed weight, scales and biases are permuted alike and stay exact.
- llama 3: the ``rope_freqs`` tensor is not a weight (config.json's ``rope_scaling``).
- gemma3: llama.cpp stores the RMSNorm weights plus one; mlx-lm adds the one itself.
- Q4_0, Q4_1 and Q8_0 tensors stay MLX-quantized (32-value groups, 4 or 8 bits) and config.json
  says so per layer; every other float tensor is written as MLX returned it (float32 for F32,
  float16 otherwise), or, with ``quantize`` bits, requantized by MLX (group size 64) when it is a
  linear or embedding weight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Optional

import mlx.core as mx

from .reader import GgufFile, GgufImportError

GROUP = 32  # the GGML block size of Q4_0, Q4_1 and Q8_0
REQUANT_GROUP = 64

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GEMMA3_LAYER = dict(
    _LAYER,
    ffn_norm="pre_feedforward_layernorm",
    post_attention_norm="post_attention_layernorm",
    post_ffw_norm="post_feedforward_layernorm",
)
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)$")


@dataclass
class Weights:
    """The tensors by mlx-lm name, and how each linear/embedding weight is stored."""

    tensors: Dict[str, mx.array] = field(default_factory=dict)
    quantization: Dict[str, dict] = field(default_factory=dict)  # module path -> {group_size, bits}
    kept: Dict[str, int] = field(default_factory=dict)  # GGML type -> tensors kept quantized
    dequantized: Dict[str, int] = field(default_factory=dict)  # GGML type -> tensors written as float
    requantized: int = 0


def convert(gguf: GgufFile, config: dict, quantize: Optional[int] = None) -> Weights:
    arch = gguf.architecture
    out = Weights()
    for name, array in gguf.tensors.items():
        stem, suffix = _split(name)
        if suffix in ("scales", "biases") and f"{stem}.weight" in gguf.tensors:
            continue  # moved with their weight
        if stem == "rope_freqs":
            continue  # llama 3's RoPE scaling, in config.json as rope_scaling
        module = _module_name(arch, stem, gguf)
        kind = gguf.types.get(name, "F32")
        if gguf.quantized(name):
            parts = {s: gguf.tensors[f"{stem}.{s}"] for s in ("scales", "biases")}
            parts["weight"] = array
            parts = {s: _unpermute(arch, stem, a, config) for s, a in parts.items()}
            for s, a in parts.items():
                out.tensors[f"{module}.{s}"] = a
            bits = array.shape[-1] * 32 // (parts["scales"].shape[-1] * GROUP)
            out.quantization[module] = {"group_size": GROUP, "bits": bits}
            out.kept[kind] = out.kept.get(kind, 0) + 1
            continue
        array = _unpermute(arch, stem, array, config)
        if arch == "gemma3" and stem.endswith("norm") and suffix == "weight":
            array = (array.astype(mx.float32) - 1).astype(array.dtype)
        if quantize and suffix == "weight" and array.ndim == 2 and not stem.endswith("norm"):
            if array.shape[-1] % REQUANT_GROUP:
                raise GgufImportError(f"{name}: {array.shape[-1]} columns cannot be grouped by 64")
            w, scales, biases = mx.quantize(array, group_size=REQUANT_GROUP, bits=quantize)
            out.tensors.update(
                {f"{module}.weight": w, f"{module}.scales": scales, f"{module}.biases": biases}
            )
            out.quantization[module] = {"group_size": REQUANT_GROUP, "bits": quantize}
            out.requantized += 1
        else:
            out.tensors[f"{module}.{suffix}"] = array
        if kind not in ("F32", "F16", "BF16"):
            out.dequantized[kind] = out.dequantized.get(kind, 0) + 1
    return out


def quantization_block(weights: Weights) -> Optional[dict]:
    """config.json's ``quantization``: the most common (group_size, bits) as the default, the
    modules that differ by name, float modules (of quantizable kinds) as ``false``."""
    if not weights.quantization:
        return None
    counts: Dict[tuple, int] = {}
    for q in weights.quantization.values():
        key = (q["group_size"], q["bits"])
        counts[key] = counts.get(key, 0) + 1
    group_size, bits = max(counts, key=counts.get)
    block: dict = {"group_size": group_size, "bits": bits}
    for module, q in sorted(weights.quantization.items()):
        if (q["group_size"], q["bits"]) != (group_size, bits):
            block[module] = dict(q)
    return block


def _split(name: str):
    stem, _, suffix = name.rpartition(".")
    return stem, suffix


def _module_name(arch: str, stem: str, gguf: GgufFile) -> str:
    if stem in _TOP:
        return _TOP[stem]
    match = _BLOCK.match(stem)
    table = _GEMMA3_LAYER if arch == "gemma3" else _LAYER
    if match is None or match.group(2) not in table:
        raise GgufImportError(f"{gguf.path.name}: tensor {stem!r} has no place in an mlx-lm {arch} model")
    return f"model.layers.{match.group(1)}.{table[match.group(2)]}"


def _unpermute(arch: str, stem: str, array: mx.array, config: dict) -> mx.array:
    """Undo llama.cpp's q/k row permutation (llama only): per head, rows [r0 r1 r0' r1' ...]
    (interleaved rotary pairs) back to [first half | second half]."""
    if arch != "llama" or not stem.endswith((".attn_q", ".attn_k")):
        return array
    heads = config["num_attention_heads"] if stem.endswith(".attn_q") else config["num_key_value_heads"]
    rows = array.shape[0]
    if array.ndim == 1:  # a bias
        return array.reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)
    cols = array.shape[1]
    return array.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
