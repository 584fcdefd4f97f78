"""Random-weight embedding and reranker folders, for tests and benchmarks: the four kinds omlx
serves on ``/v1/embeddings`` and ``/v1/rerank``.

``inference.testkit.registry.build_model`` is the entry point; it calls ``build`` here for:

- ``bert_embedding``: a sentence-transformers folder around transformers' ``BertModel`` (mean
  pooling, Normalize; ``modules.json``, ``1_Pooling/config.json``), with a WordPiece tokenizer
  trained here (``[CLS] ... [SEP]``).
- ``bert_reranker``: a cross-encoder, ``BertForSequenceClassification`` with one label, the same
  tokenizer (pairs as ``[CLS] query [SEP] document [SEP]`` with token type ids).
- ``qwen3_embedding``: laid out as Qwen3-Embedding is on the Hub: ``Qwen3ForCausalLM`` in
  config.json but the base model's weights only (``layers.0...``, no lm_head), sentence-
  transformers files with last-token pooling and Normalize, and a tokenizer that appends
  ``<|endoftext|>`` to every text.
- ``qwen3_reranker``: a Qwen3 causal LM as Qwen3-Reranker is (its folder name must say
  "reranker", as the Hub's does: that is how discovery tells it from a chat model), with
  ``yes`` and ``no`` as tokens of their own. Built from the ``tiny-close`` preset so the two
  logits are close and scores spread over (0, 1) rather than sitting at 0 or 1.

Weights are drawn with a seeded numpy generator (the files are a pure function of the
arguments). The BERT families use transformers' classes for names and shapes (torch and
transformers: ``pip install 'omlx[test]'``); the Qwen3 ones start from the hand-written qwen3.
"""

import json
from pathlib import Path

import numpy as np

from inference.testkit import text
from inference.testkit.base import MAX_TOKENIZER_VOCAB, PAD, require_test_extra, write_json, write_weights
from inference.testkit.tokenizer import WORDS, added_token

ARCHITECTURES = ("bert_embedding", "bert_reranker", "qwen3_embedding", "qwen3_reranker")

_BERT_PRESETS = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=1024,
        max_position_embeddings=512,
    ),
    "small": dict(
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        vocab_size=1024,
        max_position_embeddings=512,
    ),
}
PRESETS = {
    "bert_embedding": _BERT_PRESETS,
    "bert_reranker": _BERT_PRESETS,
    "qwen3_embedding": {"tiny": {}, "small": {}},
    "qwen3_reranker": {"tiny": {}},
}
_BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_ST_VERSION = {"sentence_transformers": "3.0.0", "transformers": "4.50.0", "pytorch": "2.5.0"}


def preset_names(arch):
    return tuple(PRESETS[arch])


def build(path, arch, preset, seed, dtype, overrides) -> Path:
    if preset not in PRESETS[arch]:
        raise ValueError(f"unknown preset {preset!r} for {arch}; expected one of {tuple(PRESETS[arch])}")
    path = Path(path)
    if arch.startswith("bert"):
        return _build_bert(path, arch, preset, seed, dtype, overrides)
    if arch == "qwen3_embedding":
        return _build_qwen3_embedding(path, preset, seed, dtype, overrides)
    return _build_qwen3_reranker(path, seed, dtype, overrides)


# -- BERT ---------------------------------------------------------------------------------------


def _build_bert(path, arch, preset, seed, dtype, overrides):
    require_test_extra("building the BERT embedding and reranker folders")
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    fields = dict(_BERT_PRESETS[preset], **overrides)
    unknown = set(overrides) - set(BertConfig().to_dict())
    if unknown:
        raise ValueError(f"unknown config fields for {arch}: {sorted(unknown)}")
    reranker = arch == "bert_reranker"
    config = BertConfig(**fields, num_labels=1) if reranker else BertConfig(**fields)
    torch.manual_seed(seed)  # only for shapes: every tensor is redrawn below
    model = (BertForSequenceClassification if reranker else BertModel)(config)
    rng = np.random.default_rng(seed)
    weights = [
        (name, _draw_bert(name, tuple(t.shape), rng, config.hidden_size))
        for name, t in model.state_dict().items()
        if not name.endswith(("position_ids", "token_type_ids"))
    ]
    path.mkdir(parents=True, exist_ok=True)
    _write_wordpiece(path, min(config.vocab_size, MAX_TOKENIZER_VOCAB), seed, config.max_position_embeddings)
    write_weights(path, weights, dtype)
    data = config.to_dict()
    data.update(
        architectures=["BertForSequenceClassification" if reranker else "BertModel"], torch_dtype=dtype
    )
    data.pop("transformers_version", None)
    write_json(path / "config.json", data)
    if not reranker:
        _write_sentence_transformers(path, "mean", config.max_position_embeddings)
    return path


def _draw_bert(name, shape, rng, hidden):
    """LayerNorm weights near 1, biases small, matrices with unit-variance outputs (so attention
    is neither flat nor one-hot), embeddings of unit variance."""
    if "LayerNorm" in name:
        base = 1.0 if name.endswith("weight") else 0.0
        return (base + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith("bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if "embeddings" in name:
        return rng.standard_normal(shape).astype(np.float32)
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def _write_wordpiece(path, vocab_size, seed, max_length):
    """A WordPiece tokenizer over a fixed vocabulary: the special tokens, every printable ASCII
    character alone and as a ``##`` continuation, then the corpus's words (sorted; as many as
    fit). Built, not trained: the trainer breaks ties in hash order, so its output differs from
    run to run. ``seed`` is unused (one vocabulary per size)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    chars = [chr(c) for c in range(0x21, 0x7F) if not chr(c).isupper()]
    words = sorted({w.lower() for w in WORDS} - set(chars))
    order = list(_BERT_SPECIALS) + chars + ["##" + c for c in chars] + words
    if vocab_size < len(_BERT_SPECIALS) + 2 * len(chars):
        raise ValueError(f"vocab_size must be at least {len(_BERT_SPECIALS) + 2 * len(chars)} for bert")
    vocab = {token: i for i, token in enumerate(order[:vocab_size])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    (path / "tokenizer.json").write_text(tokenizer.to_str(pretty=True), encoding="utf-8")
    write_json(
        path / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": max_length,
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "mask_token": "[MASK]",
            "do_lower_case": True,
            "clean_up_tokenization_spaces": False,
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        },
    )
    write_json(
        path / "special_tokens_map.json",
        {
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "mask_token": "[MASK]",
        },
    )


def _write_sentence_transformers(path, mode, max_length):
    write_json(
        path / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
    )
    write_json(path / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    write_json(
        path / "config_sentence_transformers.json",
        {
            "__version__": _ST_VERSION,
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    hidden = json.loads((path / "config.json").read_text())["hidden_size"]
    (path / "1_Pooling").mkdir(exist_ok=True)
    modes = {
        "cls_token": "cls",
        "mean_tokens": "mean",
        "max_tokens": "max",
        "mean_sqrt_len_tokens": None,
        "weightedmean_tokens": None,
        "lasttoken": "lasttoken",
    }
    flags = {f"pooling_mode_{key}": value == mode for key, value in modes.items()}
    write_json(
        path / "1_Pooling" / "config.json",
        dict({"word_embedding_dimension": hidden}, **flags, include_prompt=True),
    )
    (path / "2_Normalize").mkdir(exist_ok=True)


# -- Qwen3 --------------------------------------------------------------------------------------


def _build_qwen3_embedding(path, preset, seed, dtype, overrides):
    from safetensors.numpy import load_file

    text.build(path, "qwen3", preset, seed, "float32", overrides)
    tensors = load_file(str(path / "model.safetensors"))
    base = [(name[len("model.") :], array) for name, array in tensors.items() if name.startswith("model.")]
    write_weights(path, base, dtype)
    config = json.loads((path / "config.json").read_text())
    config["torch_dtype"] = dtype
    write_json(path / "config.json", config)
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    end = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == PAD)
    tokenizer["post_processor"] = {  # Qwen3-Embedding's: every text ends with <|endoftext|>
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": PAD, "type_id": 0}}],
        "pair": [
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": PAD, "type_id": 0}},
            {"Sequence": {"id": "B", "type_id": 1}},
            {"SpecialToken": {"id": PAD, "type_id": 1}},
        ],
        "special_tokens": {PAD: {"id": PAD, "ids": [end], "tokens": [PAD]}},
    }
    (path / "tokenizer.json").write_text(json.dumps(tokenizer, indent=2), encoding="utf-8")
    _write_sentence_transformers(path, "lasttoken", config["max_position_embeddings"])
    return path


def _build_qwen3_reranker(path, seed, dtype, overrides):
    from safetensors.numpy import load_file

    overrides = dict({"vocab_size": 1088}, **overrides)  # room for "yes" and "no" past the 1024 BPE tokens
    text.build(path, "qwen3", "tiny-close", seed, "float32", overrides)
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    size = len(tokenizer["model"]["vocab"]) + len(
        [t for t in tokenizer["added_tokens"] if t["content"] not in tokenizer["model"]["vocab"]]
    )
    words = {"yes": size, "no": size + 1}
    for word, i in words.items():  # Qwen's vocabulary has both words as single tokens
        tokenizer["added_tokens"].append(dict(added_token(word), id=i, special=False))
    (path / "tokenizer.json").write_text(json.dumps(tokenizer, indent=2), encoding="utf-8")
    tensors = load_file(str(path / "model.safetensors"))
    rng = np.random.default_rng(seed + 1)
    config = json.loads((path / "config.json").read_text())
    if config["vocab_size"] < size + 2:
        raise ValueError(f"qwen3_reranker needs vocab_size >= {size + 2}")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        table = tensors[name]
        for i in words.values():  # rows like the drawn ones (the tokenizer's rows past it are zero)
            table[i] = table[rng.integers(3, size)] + 0.1 * rng.standard_normal(table.shape[1])
    write_weights(path, list(tensors.items()), dtype)
    config["torch_dtype"] = dtype
    write_json(path / "config.json", config)
    return path
