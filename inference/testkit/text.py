"""The hand-written families (llama, mistral, qwen2, qwen3): every weight named and drawn here, so
they need neither torch nor transformers; the demo model is one of them.

The weights are drawn so that greedy decoding agrees between implementations (MLX and PyTorch in
float32 pick the same token): the logits spread over tens of units, so the gap between the top two
is far above float32 rounding, and attention scores have unit variance (sharper attention lets
rounding differences grow through the layers). Only tokens that decode to printable ASCII, newline
or ``<|im_end|>`` can win the argmax, so generated text is plain ASCII (never a family's special
token such as ``<think>`` or ``<tool_call>``). ``<|im_end|>`` is the end-of-sequence token of every
family, also where the template ends turns with another token (llama's ``<|eot_id|>``).
"""

from pathlib import Path

import numpy as np

from inference.testkit.base import (
    COMMON_SPECIALS,
    EOS,
    LOGIT_STD,
    PAD,
    emitted_mask,
    special_tokens,
    write_json,
    write_weights,
)
from inference.testkit.tokenizer import write_tokenizer

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")

PRESETS = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=1024,
        max_position_embeddings=4096,
    ),
    # The tiny model without the separation trick in its output layer: logits spread about 1
    # unit, rows of equal norm, so the top two are often close and a lossy KV cache (rounded,
    # shifted) changes tokens. For tests that must notice such a cache; not for comparisons
    # with another implementation.
    "tiny-close": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=1024,
        max_position_embeddings=4096,
    ),
    "small": dict(
        hidden_size=256,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=768,
        vocab_size=1024,
        max_position_embeddings=8192,
    ),
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
    ),
}

_COMMON_FIELDS = dict(
    hidden_act="silu",
    initializer_range=0.02,
    attention_dropout=0.0,
    rope_scaling=None,
    tie_word_embeddings=False,
    use_cache=True,
)
_ARCH_FIELDS = {
    "llama": dict(
        architectures=["LlamaForCausalLM"],
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        attention_bias=False,
        mlp_bias=False,
        head_dim=None,
        pretraining_tp=1,
    ),
    "mistral": dict(
        architectures=["MistralForCausalLM"],
        rms_norm_eps=1e-5,
        rope_theta=1000000.0,
        head_dim=None,
        sliding_window=None,
    ),
    "qwen2": dict(
        architectures=["Qwen2ForCausalLM"],
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=None,
    ),
    "qwen3": dict(
        architectures=["Qwen3ForCausalLM"],
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        attention_bias=False,
        head_dim=None,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=None,
    ),
}


def preset_names(arch):
    return tuple(PRESETS)


def build(path, arch, preset, seed, dtype, overrides) -> Path:
    """Write the folder; ``inference.testkit.registry.build_model`` checks ``arch`` and ``dtype``
    and documents the arguments."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {tuple(PRESETS)}")
    fields = build_config(arch, preset, dtype, overrides)
    path = Path(path)
    vocab = write_tokenizer(path, arch, fields["vocab_size"], seed)
    write_json(path / "config.json", fields)
    write_json(
        path / "generation_config.json",
        {
            "bos_token_id": fields["bos_token_id"],
            "eos_token_id": fields["eos_token_id"],
            "pad_token_id": fields["bos_token_id"],
        },
    )
    close = _CLOSE_LOGIT_STD.get(preset)
    write_weights(path, _weights(arch, fields, vocab, seed, special_tokens(arch), close), dtype)
    return path


def build_config(arch, preset, dtype, overrides):
    """config.json of ``arch`` from ``preset`` and ``overrides`` (ValueError for an unknown field or
    inconsistent sizes), with the common special tokens' ids."""
    config = {**_COMMON_FIELDS, **_ARCH_FIELDS[arch], **PRESETS[preset]}
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(f"unknown config fields for {arch}: {sorted(unknown)}")
    config.update(overrides)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    if heads % kv_heads:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    if config.get("head_dim") is None:
        if config["hidden_size"] % heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if "head_dim" in config:
            config["head_dim"] = config["hidden_size"] // heads
    if config.get("max_window_layers", 0) is None:
        config["max_window_layers"] = config["num_hidden_layers"]
    if config["vocab_size"] < 256 + len(special_tokens(arch)):
        raise ValueError("vocab_size must hold the 256 bytes and the special tokens")
    config.update(
        model_type=arch,
        torch_dtype=dtype,
        bos_token_id=COMMON_SPECIALS.index(PAD),
        eos_token_id=COMMON_SPECIALS.index(EOS),
    )
    return dict(sorted(config.items()))


_CLOSE_LOGIT_STD = {"tiny-close": 1.0}


def _weights(arch, config, vocab, seed, specials, close_logit_std=None):
    """Yield (name, float32 array) pairs in Hugging Face order and naming.

    Inputs of the q/k/v/gate/up projections are RMS-normalised, so unit-variance weights over
    ``sqrt(fan_in)`` give unit-variance outputs; o_proj and down_proj bring the branch back to the
    embedding's scale. Norm weights are near 1, except the final norm's random signs: with tied
    embeddings they keep the final state from scoring its own input token highest.
    """
    rng = np.random.default_rng(seed)
    d, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or d // config["num_attention_heads"]
    q_dim, kv_dim = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    qkv_bias = arch == "qwen2" or config.get("attention_bias", False)
    embed_std = LOGIT_STD / np.sqrt(d)
    if close_logit_std is not None and config["tie_word_embeddings"]:
        raise ValueError("a close-logits preset needs untied embeddings")

    def normal(shape, std):
        array = rng.standard_normal(shape, dtype=np.float32)
        array *= np.float32(std)
        return array

    def norm(size):
        return 1.0 + normal(size, 0.1)

    def vocab_matrix(rows_used):
        rows = np.zeros((config["vocab_size"], d), dtype=np.float32)
        # Rows of unequal norms make the top logit stand further from the runner-up.
        rows[: len(vocab)] = normal((len(vocab), d), embed_std) * np.exp(normal((len(vocab), 1), 0.3))
        rows[: len(vocab)][~rows_used] = 0.0
        return rows

    emitted = emitted_mask(vocab, specials)
    tied = config["tie_word_embeddings"]
    yield "model.embed_tokens.weight", vocab_matrix(emitted if tied else np.ones(len(vocab), dtype=bool))
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        yield layer + "input_layernorm.weight", norm(d)
        for name, rows in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
            yield layer + f"self_attn.{name}_proj.weight", normal((rows, d), 1 / np.sqrt(d))
            if qkv_bias:
                yield layer + f"self_attn.{name}_proj.bias", normal(rows, 0.5)
        if arch == "qwen3":
            yield layer + "self_attn.q_norm.weight", norm(head_dim)
            yield layer + "self_attn.k_norm.weight", norm(head_dim)
        yield layer + "self_attn.o_proj.weight", normal((d, q_dim), embed_std / np.sqrt(q_dim))
        if config.get("attention_bias", False):
            yield layer + "self_attn.o_proj.bias", normal(d, 0.1 * embed_std)
        yield layer + "post_attention_layernorm.weight", norm(d)
        yield layer + "mlp.gate_proj.weight", normal((inter, d), 1 / np.sqrt(d))
        yield layer + "mlp.up_proj.weight", normal((inter, d), 1 / np.sqrt(d))
        # silu(gate) * up has a standard deviation of about 0.6.
        yield layer + "mlp.down_proj.weight", normal((d, inter), 1.6 * embed_std / np.sqrt(inter))
        if config.get("mlp_bias", False):
            yield layer + "mlp.gate_proj.bias", normal(inter, 0.1)
            yield layer + "mlp.up_proj.bias", normal(inter, 0.1)
            yield layer + "mlp.down_proj.bias", normal(d, 0.1 * embed_std)
    yield "model.norm.weight", norm(d) * rng.choice(np.float32([-1, 1]), d)
    if not tied and close_logit_std is not None:
        rows = np.zeros((config["vocab_size"], d), dtype=np.float32)
        rows[: len(vocab)] = normal((len(vocab), d), close_logit_std / np.sqrt(d))
        rows[: len(vocab)][~emitted] = 0.0
        yield "lm_head.weight", rows
    elif not tied:
        yield "lm_head.weight", vocab_matrix(emitted)
