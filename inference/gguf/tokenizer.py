"""tokenizer.json, tokenizer_config.json and generation_config.json from ``tokenizer.ggml.*``.

Written with the ``tokenizers`` library (serving needs neither torch nor transformers). The GGUF
tokenizer model ``gpt2`` (byte-level BPE: tokens and merges) is supported, with the
pre-tokenizer that llama.cpp's ``tokenizer.ggml.pre`` names (below); any other model (``llama``'s
SentencePiece scores, ``bert``...) or pre-tokenizer is refused with its name. Control tokens
(type 3) are special added tokens; user-defined ones (type 4) are added tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

from .reader import GgufFile, GgufImportError

# The regexes of the Hub tokenizers that llama.cpp's pre-tokenizer names stand for.
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_NORMAL, _CONTROL, _USER = 1, 3, 4


def _pre_tokenizer(pre: str):
    from tokenizers import Regex, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("default", "gpt2", "gpt-2"):
        return byte_level
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("qwen2", "llama-bpe", "llama3"):
        pattern = _QWEN2 if pre == "qwen2" else _LLAMA3
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return None


def write_tokenizer(gguf: GgufFile, out: Path) -> Dict[str, object]:
    """Write the three files into ``out``; return the special tokens (bos/eos/pad/unk ids)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    meta = gguf.metadata
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise GgufImportError(
            f"{gguf.path.name}: GGUF tokenizer model {kind!r} is not supported; "
            "omlx imports 'gpt2' (byte-level BPE)"
        )
    pre = meta.get("tokenizer.ggml.pre", "default")
    pre_tokenizer = _pre_tokenizer(pre)
    if pre_tokenizer is None:
        raise GgufImportError(f"{gguf.path.name}: GGUF pre-tokenizer {pre!r} is not supported")
    tokens: List[str] = meta["tokenizer.ggml.tokens"]
    types: List[int] = meta.get("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    added = [
        AddedToken(t, special=k == _CONTROL, normalized=False)
        for t, k in zip(tokens, types)
        if k in (_CONTROL, _USER)
    ]
    tokenizer.add_tokens(added)

    specials = {}
    for role in ("bos", "eos", "unknown", "padding"):
        index = meta.get(f"tokenizer.ggml.{role}_token_id")
        if index is not None and 0 <= int(index) < len(tokens):
            specials[role] = (int(index), tokens[int(index)])
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False)) and "bos" in specials
    if add_bos:
        bos = specials["bos"][1]
        tokenizer.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, specials["bos"][0])]
                ),
            ]
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.save(str(out / "tokenizer.json"))

    names = {"bos": "bos_token", "eos": "eos_token", "unknown": "unk_token", "padding": "pad_token"}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": gguf.key("context_length", 4096),
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        **{names[role]: token for role, (_, token) in specials.items()},
    }
    template = meta.get("tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    _write_json(out / "tokenizer_config.json", config)
    generation: Dict[str, object] = {}
    eos_ids = [specials["eos"][0]] if "eos" in specials else []
    eot = meta.get("tokenizer.ggml.eot_token_id")
    if eot is not None and int(eot) not in eos_ids:
        eos_ids.append(int(eot))
    if "bos" in specials:
        generation["bos_token_id"] = specials["bos"][0]
    if eos_ids:
        generation["eos_token_id"] = eos_ids if len(eos_ids) > 1 else eos_ids[0]
    if "padding" in specials:
        generation["pad_token_id"] = specials["padding"][0]
    _write_json(out / "generation_config.json", generation)
    return {role: index for role, (index, _) in specials.items()}


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
