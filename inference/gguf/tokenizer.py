"""tokenizer.json, tokenizer_config.json and generation_config.json from ``tokenizer.ggml.*``.

Written with the ``tokenizers`` library (serving needs neither torch nor transformers). Two GGUF
tokenizer models are supported: ``gpt2`` (byte-level BPE: tokens and merges), with the
pre-tokenizer that llama.cpp's ``tokenizer.ggml.pre`` names (below), and ``llama`` (SentencePiece
pieces and scores, ``inference.gguf.sentencepiece``). Any other model (``bert``, ``t5``...) or
pre-tokenizer is refused with its name. Control tokens (type 3) are special added tokens;
user-defined ones (type 4) are added tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

from . import sentencepiece
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
    from tokenizers import AddedToken, processors

    meta = gguf.metadata
    kind = meta.get("tokenizer.ggml.model")
    tokens: List[str] = meta.get("tokenizer.ggml.tokens") or []
    if not tokens:
        raise GgufImportError(f"{gguf.path.name}: the GGUF has no tokenizer.ggml.tokens")
    types: List[int] = meta.get("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens)
    if kind == "gpt2":
        tokenizer = _byte_level(gguf, tokens)
    elif kind == "llama":
        tokenizer = _sentencepiece(gguf, tokens)
    else:
        raise GgufImportError(
            f"{gguf.path.name}: GGUF tokenizer model {kind!r} is not supported; "
            "omlx imports 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)"
        )
    added = [
        AddedToken(t, special=k == _CONTROL, normalized=False)
        for t, k in zip(tokens, types)
        if k in (_CONTROL, _USER)
    ]
    specials = {}
    for role in ("bos", "eos", "unknown", "padding"):
        index = meta.get(f"tokenizer.ggml.{role}_token_id")
        if index is not None and 0 <= int(index) < len(tokens):
            specials[role] = (int(index), tokens[int(index)])
    known = {t.content for t in added}
    added += [AddedToken(t, special=True, normalized=False) for _, t in specials.values() if t not in known]
    tokenizer.add_tokens(added)
    # llama.cpp adds BOS to a SentencePiece vocabulary whose file does not say otherwise
    flag = meta.get("tokenizer.ggml.add_bos_token")
    add_bos = (kind == "llama" if flag is None else bool(flag)) and "bos" in specials
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and "eos" in specials
    steps = [processors.ByteLevel(trim_offsets=False)] if kind == "gpt2" else []
    if add_bos or add_eos:
        ends = [specials[role] for role, on in (("bos", add_bos), ("eos", add_eos)) if on]
        bos = f"{specials['bos'][1]} " if add_bos else ""
        eos = f" {specials['eos'][1]}" if add_eos else ""
        steps.append(
            processors.TemplateProcessing(
                single=f"{bos}$A{eos}",
                pair=f"{bos}$A{eos} {bos}$B{eos}",
                special_tokens=[(token, index) for index, token in ends],
            )
        )
    if steps:
        tokenizer.post_processor = steps[0] if len(steps) == 1 else processors.Sequence(steps)
    tokenizer.save(str(out / "tokenizer.json"))

    names = {"bos": "bos_token", "eos": "eos_token", "unknown": "unk_token", "padding": "pad_token"}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": gguf.key("context_length", 4096),
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
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


def _byte_level(gguf: GgufFile, tokens: List[str]):
    from tokenizers import Tokenizer, decoders, models

    pre = gguf.metadata.get("tokenizer.ggml.pre", "default")
    pre_tokenizer = _pre_tokenizer(pre)
    if pre_tokenizer is None:
        raise GgufImportError(f"{gguf.path.name}: GGUF pre-tokenizer {pre!r} is not supported")
    merges = [tuple(m.split(" ", 1)) for m in gguf.metadata.get("tokenizer.ggml.merges", [])]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece(gguf: GgufFile, tokens: List[str]):
    longest = max(tokens, key=len)
    if len(longest) > sentencepiece.MAX_PIECE:
        raise GgufImportError(
            f"{gguf.path.name}: a SentencePiece token of {len(longest)} characters "
            f"(at most {sentencepiece.MAX_PIECE})"
        )
    scores = gguf.metadata.get("tokenizer.ggml.scores")
    if scores is not None and len(scores) != len(tokens):
        raise GgufImportError(f"{gguf.path.name}: {len(scores)} token scores for {len(tokens)} tokens")
    unk = gguf.metadata.get("tokenizer.ggml.unknown_token_id")
    unk_token = tokens[int(unk)] if unk is not None and 0 <= int(unk) < len(tokens) else None
    space_prefix = gguf.metadata.get("tokenizer.ggml.add_space_prefix")
    return sentencepiece.build(
        gguf.architecture, tokens, scores, unk_token, space_prefix is None or bool(space_prefix)
    )


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
