"""Build Hugging Face model folders with random weights, for tests, benchmarks and the demo model.

``build_model`` is the one entry point. llama, mistral, qwen2 and qwen3 (``HAND_WRITTEN``) are
written here weight by weight and need neither torch nor transformers; the families in
``TRANSFORMERS_BUILT`` (sliding-window, hybrid linear-attention, Mamba2 and mixture-of-experts
models) are built with transformers' own classes by ``inference.model_factory_hf`` under the same
rules for the weights, and need ``pip install 'omlx[test]'``; ``llava`` (a
vision-language model) is ``inference.model_factory_vlm``'s, ``gemma3`` (Gemma 3 with its
vision tower) ``inference.model_factory_vlm_gemma3``'s, ``mistral3`` (Mistral 3 with its Pixtral
tower) ``inference.model_factory_vlm_mistral3``'s and the Qwen-VL families
(``QWEN_VISION_BUILT``) ``inference.model_factory_vlm_qwen``'s. ``quantize_model`` writes an
MLX-format 4- or 8-bit copy of a folder with mlx-lm's converter.

A built folder has the format of a checkpoint from the Hub: ``config.json`` with the fields
transformers uses for the ``model_type``, ``model.safetensors`` (or shards and
``model.safetensors.index.json`` past 2 GiB) with Hugging Face weight names,
``generation_config.json``, and a byte-level BPE tokenizer trained here on a synthetic corpus
(``tokenizer.json``, ``tokenizer_config.json`` with a chat template,
``special_tokens_map.json``). The chat template and the special tokens it uses are the family's
(``inference.family_templates``: tool calls, tool results and, for qwen3, reasoning). The files are a pure function of the arguments: the same call writes
the same bytes on every machine.

The weights are drawn so that greedy decoding agrees between implementations (MLX and PyTorch in
float32 pick the same token): the logits spread over tens of units, so the gap between the top two
is far above float32 rounding, and attention scores have unit variance (sharper attention lets
rounding differences grow through the layers). Only tokens that decode to printable ASCII, newline
or ``<|im_end|>`` can win the argmax, so generated text is plain ASCII (never a family's special
token such as ``<think>`` or ``<tool_call>``). ``<|im_end|>`` is the end-of-sequence token of every
family, also where the template ends turns with another token (llama's ``<|eot_id|>``). A model
that does write them, a given text, is ``inference.model_factory_scripted``'s.
"""
import functools
import json
import random
import struct
from pathlib import Path

import numpy as np

from inference.family_templates import CHAT_TEMPLATES, SPECIAL_TOKENS

HAND_WRITTEN = ("llama", "mistral", "qwen2", "qwen3")  # weights named here; no torch needed
# Built with transformers' own classes (inference.model_factory_hf; needs omlx[test]).
TRANSFORMERS_BUILT = ("gemma3_text", "gpt_oss", "nemotron_h", "qwen3_5", "qwen3_moe")
# Embedding and reranker folders (inference.model_factory_encoders; the bert ones need omlx[test]).
ENCODER_BUILT = ("bert_embedding", "bert_reranker", "qwen3_embedding", "qwen3_reranker")
# Vision-language models (inference.model_factory_vlm, and model_factory_vlm_qwen for the Qwen-VL
# families; also need omlx[test]).
QWEN_VISION_BUILT = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
VISION_BUILT = ("llava", "gemma3", "mistral3") + QWEN_VISION_BUILT
ARCHITECTURES = HAND_WRITTEN + TRANSFORMERS_BUILT + ENCODER_BUILT + VISION_BUILT

PRESETS = {
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=1024, max_position_embeddings=4096,
    ),
    # The tiny model without the separation trick in its output layer: logits spread about 1
    # unit, rows of equal norm, so the top two are often close and a lossy KV cache (rounded,
    # shifted) changes tokens. For tests that must notice such a cache; not for comparisons
    # with another implementation.
    "tiny-close": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=1024, max_position_embeddings=4096,
    ),
    "small": dict(
        hidden_size=256, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=4,
        intermediate_size=768, vocab_size=1024, max_position_embeddings=8192,
    ),
    "qwen2.5-0.5b": dict(
        hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
        tie_word_embeddings=True, rope_theta=1000000.0,
    ),
}

_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 in every family
_EOS, _PAD = "<|im_end|>", "<|endoftext|>"


def _special_tokens(arch):
    """The family's special tokens, after the common three (ids 3, 4, ...)."""
    return _SPECIAL_TOKENS + SPECIAL_TOKENS[arch]

_COMMON_FIELDS = dict(
    hidden_act="silu", initializer_range=0.02, attention_dropout=0.0, rope_scaling=None,
    tie_word_embeddings=False, use_cache=True,
)
_ARCH_FIELDS = {
    "llama": dict(
        architectures=["LlamaForCausalLM"], rms_norm_eps=1e-5, rope_theta=500000.0,
        attention_bias=False, mlp_bias=False, head_dim=None, pretraining_tp=1,
    ),
    "mistral": dict(
        architectures=["MistralForCausalLM"], rms_norm_eps=1e-5, rope_theta=1000000.0,
        head_dim=None, sliding_window=None,
    ),
    "qwen2": dict(
        architectures=["Qwen2ForCausalLM"], rms_norm_eps=1e-6, rope_theta=1000000.0,
        use_sliding_window=False, sliding_window=None, max_window_layers=None,
    ),
    "qwen3": dict(
        architectures=["Qwen3ForCausalLM"], rms_norm_eps=1e-6, rope_theta=1000000.0,
        attention_bias=False, head_dim=None, use_sliding_window=False, sliding_window=None,
        max_window_layers=None,
    ),
}

_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}  # safetensors dtype codes

_LOGIT_STD = 16.0  # spread of the logits over the vocabulary
_MAX_TOKENIZER_VOCAB = 1024  # about what the synthetic corpus supports
_MAX_SHARD_BYTES = 2 * 1024**3


def build_model(path, arch="qwen2", preset="tiny", seed=0, dtype="float32", **overrides) -> Path:
    """Write a model folder of architecture ``arch`` to ``path`` and return ``path`` as a Path.

    ``overrides`` replace config.json fields of the preset (``num_hidden_layers=4``, ``head_dim``,
    ``tie_word_embeddings``...; for the transformers-built families, any field of transformers'
    config class, plus ``sliding_window_pattern`` (gemma3_text) and ``full_attention_interval``
    (qwen3_5)). An unknown architecture, preset, dtype or field raises ValueError; a family of
    ``TRANSFORMERS_BUILT`` without torch and transformers installed raises ImportError.
    ``preset_names(arch)`` lists the presets of ``arch``. The tokenizer has
    ``min(vocab_size, 1024)`` tokens; a larger model vocabulary (as in Qwen) has zero embedding
    and lm_head rows past it.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; expected one of {ARCHITECTURES}")
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(_DTYPES)}")
    if arch in TRANSFORMERS_BUILT:
        from inference import model_factory_hf

        return model_factory_hf.build(path, arch, preset, seed, dtype, overrides)
    if arch in ENCODER_BUILT:
        from inference import model_factory_encoders

        return model_factory_encoders.build(path, arch, preset, seed, dtype, overrides)
    if arch in QWEN_VISION_BUILT:
        from inference import model_factory_vlm_qwen

        return model_factory_vlm_qwen.build(path, arch, preset, seed, dtype, overrides)
    if arch == "gemma3":
        from inference import model_factory_vlm_gemma3

        return model_factory_vlm_gemma3.build(path, arch, preset, seed, dtype, overrides)
    if arch == "mistral3":
        from inference import model_factory_vlm_mistral3

        return model_factory_vlm_mistral3.build(path, arch, preset, seed, dtype, overrides)
    if arch in VISION_BUILT:
        from inference import model_factory_vlm

        return model_factory_vlm.build(path, arch, preset, seed, dtype, overrides)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {tuple(PRESETS)}")
    config = _config(arch, preset, dtype, overrides)
    path = Path(path)
    vocab = write_tokenizer(path, arch, config["vocab_size"], seed)
    _write_json(path / "config.json", config)
    _write_json(path / "generation_config.json", {
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["bos_token_id"],
    })
    close = _CLOSE_LOGIT_STD.get(preset)
    _write_weights(path, _weights(arch, config, vocab, seed, _special_tokens(arch), close), dtype)
    return path


def write_tokenizer(path, family, vocab_size, seed):
    """Write the tokenizer files with ``family``'s chat template into ``path`` (created if
    missing) and return the tokenizer's vocabulary ({token: id})."""
    specials = _special_tokens(family)
    tokenizer_json = _train_tokenizer(min(vocab_size, _MAX_TOKENIZER_VOCAB), seed, specials)
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    _write_json(path / "tokenizer_config.json", _tokenizer_config(specials, CHAT_TEMPLATES[family]))
    _write_json(path / "special_tokens_map.json", {
        "additional_special_tokens": list(specials[1:]),
        "eos_token": _added_token(_EOS), "pad_token": _added_token(_PAD),
    })
    return json.loads(tokenizer_json)["model"]["vocab"]


def _emitted(vocab, specials):
    """Mask over the tokenizer's ids: True for the tokens allowed to win the argmax."""
    printable = set(map(chr, range(0x21, 0x7F))) | {"Ġ", "Ċ"}  # byte-level space and newline
    emitted = np.zeros(len(vocab), dtype=bool)
    for token, i in vocab.items():
        emitted[i] = token == _EOS or (token not in specials and set(token) <= printable)
    return emitted


def preset_names(arch):
    """The presets ``build_model`` accepts for ``arch``."""
    if arch in TRANSFORMERS_BUILT:
        from inference.model_factory_hf import PRESETS as HF_PRESETS

        return tuple(HF_PRESETS[arch])
    if arch in ENCODER_BUILT:
        from inference.model_factory_encoders import PRESETS as ENCODER_PRESETS

        return tuple(ENCODER_PRESETS[arch])
    if arch in QWEN_VISION_BUILT:
        from inference.model_factory_vlm_qwen import PRESETS as QWEN_VLM_PRESETS

        return tuple(QWEN_VLM_PRESETS)
    if arch == "gemma3":
        from inference.model_factory_vlm_gemma3 import PRESETS as GEMMA3_PRESETS

        return tuple(GEMMA3_PRESETS)
    if arch == "mistral3":
        from inference.model_factory_vlm_mistral3 import PRESETS as MISTRAL3_PRESETS

        return tuple(MISTRAL3_PRESETS)
    if arch in VISION_BUILT:
        from inference.model_factory_vlm import PRESETS as VLM_PRESETS

        return tuple(VLM_PRESETS)
    return tuple(PRESETS)


def build_quantized(path, bits, group_size=64, **build_args) -> Path:
    """``build_model(**build_args)`` into a temporary folder, then ``quantize_model`` into ``path``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        source = build_model(Path(tmp) / "model", **build_args)
        if Path(path).exists() and not any(Path(path).iterdir()):
            Path(path).rmdir()  # convert refuses an existing folder, even an empty one
        quantize_model(source, path, bits=bits, group_size=group_size)
    return Path(path)


def quantize_model(src, dst, bits=4, group_size=64, dtype=None) -> Path:
    """Write an MLX-format quantized copy of the model folder ``src`` to ``dst`` (which must not
    exist) and return ``dst`` as a Path, as ``mlx_lm.convert --quantize`` does: weights in
    mlx-lm's naming (after its ``sanitize``), every Linear and Embedding whose input size is a
    multiple of ``group_size`` packed to ``bits`` bits (uint32, with per-group scales and biases;
    routers and other layers kept as the model's ``quant_predicate`` says), and config.json's
    ``quantization`` entry. ``dtype`` is that of the unquantized tensors (default: as stored).
    Needs mlx-lm only.
    """
    from mlx_lm.convert import convert

    if bits not in (2, 3, 4, 5, 6, 8):
        raise ValueError(f"bits must be 2, 3, 4, 5, 6 or 8, got {bits!r}")
    convert(str(src), str(dst), quantize=True, q_bits=bits, q_group_size=group_size, dtype=dtype)
    return Path(dst)


def _config(arch, preset, dtype, overrides):
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
    if config["vocab_size"] < 256 + len(_special_tokens(arch)):
        raise ValueError("vocab_size must hold the 256 bytes and the special tokens")
    config.update(
        model_type=arch, torch_dtype=dtype,
        bos_token_id=_SPECIAL_TOKENS.index(_PAD), eos_token_id=_SPECIAL_TOKENS.index(_EOS),
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
    embed_std = _LOGIT_STD / np.sqrt(d)
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

    emitted = _emitted(vocab, specials)
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


def _write_weights(path, weights, dtype):
    """Write ``weights`` to model.safetensors, or to shards and an index past _MAX_SHARD_BYTES."""
    for stale in [*path.glob("model*.safetensors"), path / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)
    code = _DTYPES[dtype]
    shards, size = [{}], 0
    for name, array in weights:
        array = _bfloat16_bits(array) if dtype == "bfloat16" else array.astype(dtype)
        if shards[-1] and size + array.nbytes > _MAX_SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = array
        size += array.nbytes
    if len(shards) == 1:
        _write_safetensors(path / "model.safetensors", shards[0], code)
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        filename = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        _write_safetensors(path / filename, shard, code)
        weight_map.update(dict.fromkeys(shard, filename))
    total = sum(array.nbytes for shard in shards for array in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    _write_json(path / "model.safetensors.index.json", index)


def _bfloat16_bits(array):
    """Round float32 to bfloat16 (to nearest even) and return the bits as uint16: numpy has no bfloat16."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _write_safetensors(path, tensors, code):
    """Write the safetensors format: u64 header size, JSON header padded to 8 bytes, raw data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array).data)


def _tokenizer_config(specials, chat_template):
    return {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {**_added_token(token), "special": True} for i, token in enumerate(specials)
        },
        "additional_special_tokens": list(specials[1:]), "bos_token": None,
        "chat_template": chat_template, "clean_up_tokenization_spaces": False, "eos_token": _EOS,
        "errors": "replace", "model_max_length": 131072, "pad_token": _PAD,
        "split_special_tokens": False, "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": None,
    }


def _added_token(content):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


@functools.lru_cache(maxsize=8)
def _train_tokenizer(vocab_size, seed, specials=_SPECIAL_TOKENS):
    """Train a GPT-2 style byte-level BPE (about 0.2 s) and return its tokenizer.json text.

    The special tokens take the first ids and the 256 byte tokens come next, so any text encodes.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    return tokenizer.to_str(pretty=True)


def _corpus(seed, paragraphs=2000):
    """Yield English-like paragraphs drawn from a fixed word list with a seeded RNG."""
    rng = random.Random(seed)
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(1, 6)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
            if rng.random() < 0.2:
                words.insert(rng.randrange(len(words)), str(rng.randint(0, 2048)))
            if rng.random() < 0.3:
                words[rng.randrange(len(words))] += ","
            sentences.append(" ".join(words).capitalize() + rng.choice(".....?!:"))
        yield " ".join(sentences) + "\n" * rng.randint(1, 2)


def _write_json(path, data):
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


_WORDS = """
the of and to in is that it was for on are as with his they at be this from have or by one had
not but what all were when we there can an your which their said if do will each about how up out
them then she many some so these would other into has more her two like him see time could no make
than first been its who now people my made over did down only way find use may water long little
very after words called just where most know get through back much before go good new write our
used me man too any day same right look think also around another came come work three must
because does part even place well such here take why help put different away again off went old
number great tell men say small every found still between name should home big give air line set
own under read last never us left end along while might next sound below saw something thought
both few those always show large often together asked house world going want school important
until form food keep children feet land side without boy once animal life enough took four head
above kind began almost live page got earth need far hand high year mother light country father
let night picture being study second soon story since white ever paper hard near sentence better
best across during today however sure knew try told young sun thing whole hear example heard
several change answer room sea against top turned learn point city play toward five himself usually
money seen car morning river model cache token server memory block prefix request stream layer
system user assistant
""".split()
