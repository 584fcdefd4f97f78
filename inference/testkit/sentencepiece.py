"""A SentencePiece-style vocabulary as llama.cpp stores one in a GGUF file (``tokenizer.ggml.model
= llama``): ``<unk>``, ``<s>``, ``</s>``, the 256 byte tokens ``<0x00>``..``<0xFF>``, the merged
pieces best first (score ``-rank``), then the single characters (lowest scores). The pieces are a
BPE trained on the kit's synthetic corpus with SentencePiece's ``▁`` for spaces, so real text
splits into real pieces and anything outside the corpus (accents, CJK, emoji) needs the bytes.
Needs the ``tokenizers`` package only."""

import functools
import json
from dataclasses import dataclass
from typing import List

from inference.testkit.tokenizer import _corpus

UNKNOWN, CONTROL, BYTE, NORMAL = 2, 3, 6, 1  # llama.cpp's token types
SPECIALS = ("<unk>", "<s>", "</s>")
# Mistral's instruction format, as SentencePiece chat models write it
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class SentencePieceVocab:
    """The three parallel arrays of ``tokenizer.ggml.*`` (tokens, scores, token_type)."""

    tokens: List[str]
    scores: List[float]
    types: List[int]


@functools.lru_cache(maxsize=4)
def sentencepiece_vocab(size=512, seed=0, gemma=False) -> SentencePieceVocab:
    """About ``size`` tokens (fewer if the corpus runs out of merges); the same on every machine.
    ``gemma``: plus pieces of two and three spaces, stored as real spaces as gemma's GGUFs do."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    trainer = trainers.BpeTrainer(vocab_size=size - len(SPECIALS) - 256, show_progress=False)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    vocab = tokenizer.get_vocab()
    merged = ["".join(pair) for pair in _merges(tokenizer)]
    merged = list(dict.fromkeys(p for p in merged if p in vocab and "\n" not in p))
    chars = sorted((t for t in vocab if len(t) == 1 and t != "\n"), key=vocab.get)
    chars += ["  ", "   "] if gemma else []
    tokens = [*SPECIALS, *(f"<0x{b:02X}>" for b in range(256)), *merged, *chars]
    scores = [0.0] * (len(SPECIALS) + 256) + [-float(i) for i in range(len(merged) + len(chars))]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * (len(merged) + len(chars))
    return SentencePieceVocab(tokens, scores, types)


def _merges(tokenizer):
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [m.split(" ", 1) if isinstance(m, str) else m for m in merges]
