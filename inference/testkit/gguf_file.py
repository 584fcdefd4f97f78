"""GGUF files written from the testkit's model folders, the way llama.cpp's converter writes them.

``write_gguf(folder, out, tensor_type)`` renames the weights to GGUF names, permutes llama's
``attn_q``/``attn_k`` rows for interleaved RoPE, stores gemma3's RMSNorm weights plus one, writes
the ``{arch}.*`` keys and the byte-level BPE tokenizer (``tokenizer.ggml.model = gpt2``) with the
chat template. ``tensor_type`` "Q8_0" (or another type with 32-value blocks that gguf-py writes:
Q4_0, Q4_1, Q5_0, Q5_1) stores every 2-D weight in that type, the rest F32. For tests of
``inference.gguf`` against transformers' GGUF loader; needs ``gguf``.
"""

import json
from pathlib import Path

import numpy as np

# transformers model_type -> GGUF architecture
GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3"}
_LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_GEMMA3 = dict(
    _LAYER,
    post_attention_layernorm="post_attention_norm",
    pre_feedforward_layernorm="ffn_norm",
    post_feedforward_layernorm="post_ffw_norm",
)
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def write_gguf(folder, out, tensor_type="F32", architecture=None, sentencepiece=None) -> Path:
    """Write ``folder`` (a testkit model) as the GGUF file ``out``; ``architecture`` overrides the
    GGUF architecture key (to write one omlx refuses); ``sentencepiece`` (a
    ``testkit.sentencepiece.SentencePieceVocab`` as long as the model's vocabulary) replaces the
    folder's tokenizer with a SentencePiece one (``tokenizer.ggml.model = llama``)."""
    import gguf
    from safetensors.numpy import load_file

    folder, out = Path(folder), Path(out)
    config = json.loads((folder / "config.json").read_text())
    model_type = config["model_type"]
    arch = architecture or GGUF_ARCH[model_type]
    writer = gguf.GGUFWriter(str(out), arch)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for key, value in (
        ("block_count", config["num_hidden_layers"]),
        ("context_length", config["max_position_embeddings"]),
        ("embedding_length", config["hidden_size"]),
        ("feed_forward_length", config["intermediate_size"]),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv_heads),
        ("attention.key_length", config.get("head_dim", config["hidden_size"] // heads)),
        ("attention.value_length", config.get("head_dim", config["hidden_size"] // heads)),
        ("vocab_size", config["vocab_size"]),
    ):
        writer.add_uint32(f"{arch}.{key}", int(value))
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    writer.add_float32(f"{arch}.rope.freq_base", config["rope_theta"])
    if model_type == "gemma3_text":
        writer.add_uint32(f"{arch}.attention.sliding_window", config["sliding_window"])
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        writer.add_tensor("rope_freqs.weight", _llama3_rope_freqs(config["rope_theta"], head_dim, scaling))
    if sentencepiece is None:
        _write_tokenizer(writer, folder, config)
    else:
        _write_sentencepiece(writer, sentencepiece)
    layer = _GEMMA3 if model_type == "gemma3_text" else _LAYER
    for name, array in sorted(load_file(str(folder / "model.safetensors")).items()):
        module, suffix = name.rsplit(".", 1)
        if module in _TOP:
            target = _TOP[module]
        else:
            index, rest = module[len("model.layers.") :].split(".", 1)
            target = f"blk.{index}.{layer[rest]}"
        array = array.astype(np.float32)
        if model_type == "llama" and target.endswith((".attn_q", ".attn_k")):
            n = heads if target.endswith(".attn_q") else kv_heads
            array = _permute(array, n)
        if model_type == "gemma3_text" and suffix == "weight" and target.endswith("norm"):
            array = array + 1
        if tensor_type != "F32" and array.ndim == 2 and array.shape[1] % 32 == 0:
            quant = getattr(gguf.GGMLQuantizationType, tensor_type)
            writer.add_tensor(f"{target}.{suffix}", gguf.quants.quantize(array, quant), raw_dtype=quant)
        else:
            writer.add_tensor(f"{target}.{suffix}", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _llama3_rope_freqs(base, head_dim, scaling):
    """llama.cpp's rope_freqs for llama 3's RoPE scaling: per frequency, what it is divided by."""
    old = scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelen = 2 * np.pi * base ** (np.arange(0, head_dim, 2) / head_dim)
    smooth = np.clip((old / wavelen - low) / (high - low), 0, 1)
    return (1 / ((1 - smooth) / scaling["factor"] + smooth)).astype(np.float32)


def _permute(array, heads):
    """llama.cpp's converter: per head, the rotary halves interleaved row by row."""
    rows = array.shape[0]
    return array.reshape(heads, 2, rows // heads // 2, *array.shape[1:]).swapaxes(1, 2).reshape(array.shape)


def _write_tokenizer(writer, folder, config):
    spec = json.loads((folder / "tokenizer.json").read_text())
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    vocab = dict(spec["model"]["vocab"])
    special = {t["content"]: t["id"] for t in spec["added_tokens"]}
    vocab.update(special)
    tokens = [None] * (max(vocab.values()) + 1)
    for token, index in vocab.items():
        tokens[index] = token
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", "default")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.token_type", [3 if t in special else 1 for t in tokens])
    writer.add_array("tokenizer.ggml.merges", merges)
    writer.add_uint32("tokenizer.ggml.eos_token_id", special[settings["eos_token"]])
    if settings.get("pad_token"):
        writer.add_uint32("tokenizer.ggml.padding_token_id", special[settings["pad_token"]])
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    template = settings.get("chat_template") or _template_file(folder)
    if template:
        writer.add_string("tokenizer.chat_template", template)


def _write_sentencepiece(writer, vocab):
    from inference.testkit.sentencepiece import CHAT_TEMPLATE

    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_array("tokenizer.ggml.tokens", vocab.tokens)
    writer.add_array("tokenizer.ggml.scores", vocab.scores)
    writer.add_array("tokenizer.ggml.token_type", vocab.types)
    for role, index in (("unknown", 0), ("bos", 1), ("eos", 2)):
        writer.add_uint32(f"tokenizer.ggml.{role}_token_id", index)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_bool("tokenizer.ggml.add_eos_token", False)
    writer.add_string("tokenizer.chat_template", CHAT_TEMPLATE)


def _template_file(folder):
    path = folder / "chat_template.jinja"
    return path.read_text() if path.is_file() else None
