"""Random-weight model folders for the families that transformers builds: sliding-window attention
(``gemma3_text``, ``gpt_oss``), hybrid linear attention (``qwen3_5``, Gated DeltaNet), Mamba2
hybrids (``nemotron_h``) and mixtures of experts (``qwen3_moe``, ``gpt_oss``).

``inference.testkit.registry.build_model`` is the entry point; it calls ``build`` here for these
architectures. The config comes from transformers' own config class and the model from
``AutoModelForCausalLM.from_config`` (so every weight name and shape is the one transformers
expects), then every weight is redrawn with a seeded numpy generator under the same rules as
the hand-written families (see ``inference.testkit.text``): logits spread over tens of units,
unit-variance attention scores, only printable ASCII and ``<|im_end|>`` can win the argmax.
The folder is then written as a checkpoint of the family looks on the Hub, loadable by mlx-lm:

- ``qwen3_5``: ``model_type: qwen3_5`` with a ``text_config`` and ``model.language_model.*``
  weight names, as the published (multimodal) Qwen3.5 checkpoints, without vision weights.
  mlx-lm knows no ``qwen3_5_text`` model type; transformers loads this with
  ``AutoModelForCausalLM`` (``Qwen3_5ForCausalLM``).
- every family: transformers 5's config plus the keys mlx-lm reads, as
  ``inference.engine.config_compat`` maps them (``rope_theta`` beside ``rope_parameters``;
  gemma3_text's ``sliding_window_pattern`` and ``rope_local_base_freq``; qwen3_moe's
  ``num_experts``). ``inference.testkit.native`` writes the folders without them.
- ``gpt_oss``: the experts as unquantized mlx-community checkpoints store them,
  ``experts.{gate,up,down}_proj.{weight,bias}`` of ``[experts, out, in]``: mlx-lm reads
  openai's MXFP4 blocks or this, not transformers' fused ``gate_up_proj`` ``[experts, in, out]``
  (a bf16 export of gpt-oss from transformers does not load in mlx-lm 0.32). So
  ``from_pretrained`` cannot load the folder; ``load_transformers`` fuses them back.

Needs torch and transformers (``pip install 'omlx[test]'``); the server never imports this.
"""

import tempfile
from pathlib import Path

import numpy as np

from inference.testkit.base import (
    LOGIT_STD,
    emitted_mask,
    require_test_extra,
    special_tokens,
    write_json,
    write_weights,
)
from inference.testkit.tokenizer import write_tokenizer

ARCHITECTURES = ("gemma3_text", "gpt_oss", "nemotron_h", "qwen3_5", "qwen3_moe")

# The chat template (and its special tokens) of each family, borrowed from a hand-written one:
# Qwen3.5 and Qwen3-MoE use Qwen3's format; the others get ChatML.
TEMPLATE_FAMILY = {
    "gemma3_text": "qwen2",
    "gpt_oss": "qwen2",
    "nemotron_h": "qwen2",
    "qwen3_5": "qwen3",
    "qwen3_moe": "qwen3",
}

_TINY = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=1024,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
_HALF_B = dict(
    hidden_size=896,
    num_attention_heads=14,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=151936,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
)

# gpt-oss's YaRN RoPE, except truncate=True: its checkpoints say False (transformers then keeps the
# correction range fractional) but mlx-lm 0.32 always rounds it, so the two disagree by up to
# 0.7 in the logits from the second position on; with True they compute the same thing.
_GPT_OSS_ROPE = dict(
    rope_type="yarn",
    rope_theta=150000.0,
    factor=32.0,
    beta_fast=32.0,
    beta_slow=1.0,
    original_max_position_embeddings=4096,
    truncate=True,
)

PRESETS = {
    "gemma3_text": {
        # Sliding window of 16 tokens, shorter than test prompts; layers 1 and 3 attend to all.
        "tiny": dict(
            _TINY, num_hidden_layers=4, intermediate_size=128, sliding_window=16, sliding_window_pattern=2
        ),
        "qwen2.5-0.5b": dict(
            _HALF_B,
            num_hidden_layers=24,
            intermediate_size=4864,
            sliding_window=512,
            sliding_window_pattern=6,
        ),
    },
    "qwen3_5": {
        # full_attention_interval=4: layers 0-2 Gated DeltaNet, layer 3 full attention.
        "tiny": dict(
            _TINY,
            num_hidden_layers=4,
            intermediate_size=128,
            full_attention_interval=4,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
        "qwen2.5-0.5b": dict(
            _HALF_B,
            num_hidden_layers=24,
            intermediate_size=4864,
            full_attention_interval=4,
            linear_num_key_heads=8,
            linear_num_value_heads=16,
            linear_key_head_dim=64,
            linear_value_head_dim=64,
        ),
    },
    "gpt_oss": {
        # Alternating sliding (16 tokens) and full layers, 4 experts, 2 active.
        "tiny": dict(
            _TINY,
            num_hidden_layers=4,
            intermediate_size=48,
            sliding_window=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            rope_parameters=_GPT_OSS_ROPE,
        ),
    },
    "nemotron_h": {
        # Mamba2, MLP, attention, MLP, Mamba2, MLP ("M-*-M-").
        "tiny": dict(
            _TINY,
            layers_block_type=["mamba", "mlp", "attention", "mlp", "mamba", "mlp"],
            intermediate_size=128,
            mamba_num_heads=4,
            mamba_head_dim=16,
            ssm_state_size=16,
            n_groups=2,
            conv_kernel=4,
            chunk_size=16,
        ),
    },
    "qwen3_moe": {
        "tiny": dict(
            _TINY,
            num_hidden_layers=2,
            intermediate_size=128,
            moe_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=True,
        ),
    },
}

_ROUTER_STD = 3.0  # router logits spread well apart, so top-k picks the same experts in MLX and torch


def _require_transformers():
    require_test_extra("building these model families")


def preset_names(arch):
    return tuple(PRESETS[arch])


def build(path, arch, preset, seed, dtype, overrides) -> Path:
    """Write the folder (see the module docstring); ``inference.testkit.registry.build_model`` checks
    ``dtype`` and documents the arguments."""
    if preset not in PRESETS[arch]:
        raise ValueError(f"unknown preset {preset!r} for {arch}; expected one of {tuple(PRESETS[arch])}")
    fields = dict(PRESETS[arch][preset])
    unknown = set(overrides) - set(fields) - set(_config_class(arch)().to_dict())
    if unknown:
        raise ValueError(f"unknown config fields for {arch}: {sorted(unknown)}")
    if "layer_types" in overrides and arch in ("gemma3_text", "qwen3_5"):
        # mlx-lm derives these families' layer types from a period, not from a list.
        period = "sliding_window_pattern" if arch == "gemma3_text" else "full_attention_interval"
        raise ValueError(f"{arch}: set {period} instead of layer_types")
    fields.update(overrides)
    if fields["vocab_size"] < 256 + len(special_tokens(TEMPLATE_FAMILY[arch])):
        raise ValueError("vocab_size must hold the 256 bytes and the special tokens")
    _require_transformers()
    config = _hf_config(arch, fields)
    path = Path(path)
    vocab = write_tokenizer(path, TEMPLATE_FAMILY[arch], config.vocab_size, seed)
    weights = _draw(arch, config, vocab, seed, special_tokens(TEMPLATE_FAMILY[arch]))
    write_weights(path, _checkpoint_weights(arch, weights), dtype)
    write_json(path / "config.json", _config_json(arch, config, fields, dtype))
    write_json(
        path / "generation_config.json",
        {
            "bos_token_id": 0,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
    )
    return path


def _config_class(arch):
    _require_transformers()
    from transformers import AutoConfig
    from transformers.models.qwen3_5 import Qwen3_5TextConfig

    return Qwen3_5TextConfig if arch == "qwen3_5" else type(AutoConfig.for_model(arch))


def _hf_config(arch, fields):
    fields = dict(fields, bos_token_id=0, eos_token_id=2, pad_token_id=0)
    if arch == "gemma3_text":
        pattern = fields.pop("sliding_window_pattern")
        fields["layer_types"] = [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(fields["num_hidden_layers"])
        ]
        fields["query_pre_attn_scalar"] = fields["head_dim"]  # unit-variance attention scores
    if arch == "qwen3_5":
        interval = fields.pop("full_attention_interval")
        fields["layer_types"] = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(fields["num_hidden_layers"])
        ]
    if arch == "gpt_oss" and "layer_types" not in fields:
        fields["layer_types"] = [
            "sliding_attention" if i % 2 == 0 else "full_attention"
            for i in range(fields["num_hidden_layers"])
        ]
    return _config_class(arch)(**fields)


def _config_json(arch, config, fields, dtype):
    """config.json as a checkpoint of the family has it (see the module docstring)."""
    data = config.to_dict()
    data.pop("transformers_version", None)
    data.update(dtype=dtype, torch_dtype=dtype, architectures=[_ARCH_CLASS[arch]])
    if arch == "gemma3_text":
        data.pop("_sliding_window_pattern", None)  # transformers' default, not this model's
    if arch == "nemotron_h":
        data["time_step_limit"] = [float(x) for x in data["time_step_limit"]]
    if arch == "qwen3_5":
        data["full_attention_interval"] = fields["full_attention_interval"]
        data = {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "text_config": data,
            "tie_word_embeddings": data["tie_word_embeddings"],
            "dtype": dtype,
            "torch_dtype": dtype,
            "bos_token_id": 0,
            "eos_token_id": 2,
            "pad_token_id": 0,
        }
    # The keys mlx-lm reads beside transformers 5's (rope_theta, sliding_window_pattern,
    # num_experts...), as a folder converted for mlx-lm has them.
    from inference.engine.config_compat import for_mlx_lm

    return dict(sorted(for_mlx_lm(data).items()))


_ARCH_CLASS = {
    "gemma3_text": "Gemma3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}


def _draw(arch, config, vocab, seed, specials):
    """Create the transformers model, redraw its weights and return them as transformers saves
    them ({name: float32 array}, per-expert tensors where its checkpoints have them)."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    from transformers.utils import logging

    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = model.state_dict()
    with torch.no_grad():
        for name, array in _redraw(arch, config, state, vocab, seed, specials):
            state[name].copy_(torch.from_numpy(array))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        weights = {}
        for file in sorted(Path(tmp).glob("model*.safetensors")):
            weights.update(load_file(file))
    return weights


def _redraw(arch, config, state, vocab, seed, specials):
    """Yield (name, new float32 array) for every tensor of ``state``, in its order.

    Norm weights keep transformers' convention: where it initialises them to zero the norm
    scales by ``1 + weight`` (gemma3, qwen3_5), so the stored value is the scale minus 1.
    """
    rng = np.random.default_rng(seed)
    d = config.hidden_size
    embed_std = LOGIT_STD / np.sqrt(d)
    emitted = emitted_mask(vocab, specials)
    tied = config.get_text_config().tie_word_embeddings

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def vocab_matrix(rows_used, std):
        rows = np.zeros((config.vocab_size, d), dtype=np.float32)
        rows[: len(vocab)] = normal((len(vocab), d), std) * np.exp(normal((len(vocab), 1), 0.3))
        rows[: len(vocab)][~rows_used] = 0.0
        return rows

    for name, tensor in state.items():
        shape, init = tuple(tensor.shape), tensor.float().numpy()
        leaf = ".".join(name.split(".")[-2:])  # "o_proj.weight", "experts.down_proj", "mixer.A_log"
        if name.endswith(("embed_tokens.weight", "embeddings.weight")):
            if tied:  # also the output head: the logits' scale, and only emitted tokens can win
                yield name, vocab_matrix(emitted, embed_std)
                continue
            # Gemma multiplies the embeddings by sqrt(hidden_size): the residual stream gets the
            # same scale as in the other families.
            scale = 1 / np.sqrt(d) if arch == "gemma3_text" else 1.0
            yield name, vocab_matrix(np.ones(len(vocab), dtype=bool), embed_std * scale)
        elif name == "lm_head.weight":
            if not tied:  # tied: the same tensor as the embedding, drawn above
                yield name, vocab_matrix(emitted, embed_std)
        elif len(shape) == 1 and "norm" in name:
            scale = 1.0 + normal(shape, 0.1)
            if (
                name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight"))
                and arch == "gemma3_text"
            ):
                scale *= embed_std  # gemma normalises each branch's output: bring it to the residual's scale
            if name in ("model.norm.weight", "model.norm_f.weight"):
                scale *= rng.choice(np.float32([-1, 1]), shape)
            yield name, scale - (1.0 if np.all(init == 0) else 0.0)
        else:
            yield name, _other(arch, name, leaf, shape, normal, rng, embed_std)


def _other(arch, name, leaf, shape, normal, rng, embed_std):
    """A weight that is not an embedding, output head or norm."""
    if leaf in ("o_proj.weight", "down_proj.weight", "out_proj.weight", "experts.down_proj"):
        fan_in = shape[1] if arch == "gpt_oss" and leaf == "experts.down_proj" else shape[-1]
        return normal(shape, 1.6 * embed_std / np.sqrt(fan_in))
    if leaf in ("experts.gate_up_proj",):
        fan_in = shape[1] if arch == "gpt_oss" else shape[-1]
        return normal(shape, 1 / np.sqrt(fan_in))
    if (
        leaf in ("router.weight", "gate.weight")
        and "mlp" in name
        and len(shape) == 2
        and "experts" not in name
    ):
        return normal(shape, _ROUTER_STD / np.sqrt(shape[1]))
    if leaf.endswith(".weight") and len(shape) == 2:  # q/k/v, gate/up, in_proj*: unit-variance outputs
        return normal(shape, 1 / np.sqrt(shape[1]))
    if leaf == "conv1d.weight":  # depthwise [channels, 1, kernel]
        return normal(shape, 1 / np.sqrt(shape[-1]))
    if leaf.endswith(".sinks"):  # gpt_oss: a learned logit per head that takes part of the attention
        return normal(shape, 1.0)
    if leaf.endswith(".A_log"):
        # Decay per token exp(-A * dt): Mamba's dt is small (below), Gated DeltaNet's is about 1,
        # so its A stays under 1 to keep context for more than a few tokens.
        low, high = (1.0, 16.0) if arch == "nemotron_h" else (0.05, 1.0)
        return np.log(rng.uniform(low, high, shape)).astype(np.float32)
    if leaf.endswith(".dt_bias"):
        if arch == "nemotron_h":  # softplus(dt_bias) in [0.001, 0.1], as Mamba2 initialises it
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), shape))
            return (dt + np.log(-np.expm1(-dt))).astype(np.float32)
        return 1.0 + normal(shape, 0.1)
    if leaf.endswith(".D"):
        return 1.0 + normal(shape, 0.1)
    if leaf.endswith("bias") and leaf.startswith(("o_proj", "experts.down_proj")):
        return normal(shape, 0.1 * embed_std)
    if leaf.endswith("bias"):  # q/k/v, router, expert and conv biases
        return normal(shape, 0.5 if leaf.startswith(("q_proj", "k_proj", "v_proj", "router")) else 0.1)
    raise ValueError(f"{arch}: no rule to draw weight {name} {shape}")


def _checkpoint_weights(arch, weights):
    """(name, array) pairs in the checkpoint's naming and layout (see the module docstring)."""
    for name, array in sorted(weights.items()):
        if arch == "qwen3_5" and name.startswith("model."):
            name = "model.language_model." + name[len("model.") :]
        if arch == "gpt_oss" and ".experts." in name:
            yield from _gpt_oss_experts(name, array)
            continue
        yield name, array


def _gpt_oss_experts(name, array):
    """transformers' fused, transposed expert tensors as separate [experts, out, in] ones."""
    prefix, _, kind = name.rpartition(".")
    if kind == "gate_up_proj":  # [experts, hidden, 2 x intermediate], gate and up interleaved
        yield prefix + ".gate_proj.weight", np.ascontiguousarray(np.swapaxes(array[..., ::2], 1, 2))
        yield prefix + ".up_proj.weight", np.ascontiguousarray(np.swapaxes(array[..., 1::2], 1, 2))
    elif kind == "gate_up_proj_bias":
        yield prefix + ".gate_proj.bias", np.ascontiguousarray(array[..., ::2])
        yield prefix + ".up_proj.bias", np.ascontiguousarray(array[..., 1::2])
    elif kind == "down_proj":  # [experts, intermediate, hidden]
        yield prefix + ".down_proj.weight", np.ascontiguousarray(np.swapaxes(array, 1, 2))
    elif kind == "down_proj_bias":
        yield prefix + ".down_proj.bias", array
    else:
        raise ValueError(f"gpt_oss: unexpected expert tensor {name}")


def _gpt_oss_fused(tensors):
    """The inverse of _gpt_oss_experts over a checkpoint's {name: torch tensor}."""
    import torch

    fused = {}
    for name, tensor in tensors.items():
        if ".experts." not in name:
            fused[name] = tensor
            continue
        prefix, proj, kind = name.rsplit(".", 2)
        if proj == "down_proj":
            fused[prefix + (".down_proj" if kind == "weight" else ".down_proj_bias")] = (
                tensor.transpose(1, 2).contiguous() if kind == "weight" else tensor
            )
        elif proj == "gate_proj":
            up = tensors[f"{prefix}.up_proj.{kind}"]
            if (
                kind == "weight"
            ):  # [experts, intermediate, hidden] each -> [experts, hidden, 2 x intermediate]
                interleaved = torch.stack([tensor, up], dim=2).flatten(1, 2)
                fused[prefix + ".gate_up_proj"] = interleaved.transpose(1, 2).contiguous()
            else:
                fused[prefix + ".gate_up_proj_bias"] = torch.stack([tensor, up], dim=-1).flatten(-2)
    return fused


def load_transformers(path):
    """The folder's model in transformers, float32, in eval mode (gpt_oss: experts transposed back)."""
    _require_transformers()
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    if config.model_type != "gpt_oss":
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = {}
    for file in sorted(path.glob("model*.safetensors")):
        tensors.update(load_file(file))
    state = {name: tensor.float() for name, tensor in _gpt_oss_fused(tensors).items()}
    model.load_state_dict(state, strict=True)
    return model.eval()
