"""The tokenizer of a GGUF whose ``tokenizer.ggml.model`` is ``llama``: SentencePiece (older llama,
mistral, gemma), as a ``tokenizers`` BPE with byte fallback.

A GGUF keeps SentencePiece's pieces (``▁`` for a space, ``<0x41>`` byte tokens) and their scores,
no merges. The merges are the ones the vocabulary implies: every split of a piece into two pieces
of the vocabulary, ranked by the score of the piece they make (best first). That is the conversion
transformers' GGUF loader does (``integrations/gguf/gguf_tokenizer_mapping.py``, its
``LlamaTokenizer`` and ``GemmaTokenizer``); this module writes the same tokenizer with the
``tokenizers`` library alone, so serving needs neither transformers nor torch, and
tests/reference/test_gguf_sentencepiece.py checks it against that loader.

Two shapes, by architecture: llama's (a ``▁`` prepended to the text, stripped again when decoding,
unless the file's ``add_space_prefix`` is false: llama.cpp's rule)
and gemma's (spaces replaced by ``▁``, nothing prepended; its multi-space pieces are stored as real
spaces and its scores do not follow its merges, so the order of the file ranks them).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

_SPACE = "▁"
GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
MAX_PIECE = 512  # characters; real pieces are under 100 (gemma's longest: 31 spaces)


def build(
    architecture: str,
    tokens: List[str],
    scores: Optional[List[float]],
    unk: Optional[str],
    space_prefix: bool = True,
):
    """The ``tokenizers.Tokenizer`` (model, normalizer, pre-tokenizer, decoder; no added tokens).
    ``space_prefix`` False (``tokenizer.ggml.add_space_prefix``, which llama.cpp honours and
    transformers' loader ignores): no ``▁`` prepended to llama-shaped text, none stripped."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    gemma = architecture in GEMMA_ARCHITECTURES
    if gemma:
        tokens = [_SPACE * len(t) if t and not t.strip(" ") else t for t in tokens]
        ranks = {token: -float(i) for i, token in enumerate(tokens)}
    else:
        ranks = dict(zip(tokens, scores if scores is not None else [0.0] * len(tokens)))
    vocab = {token: i for i, token in enumerate(tokens)}
    model = models.BPE(
        vocab=vocab,
        merges=implied_merges(vocab, ranks),
        fuse_unk=True,
        byte_fallback=True,
        unk_token=(unk or "<unk>") if gemma else None,
    )
    tokenizer = Tokenizer(model)
    steps = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if gemma:
        tokenizer.normalizer = normalizers.Replace(" ", _SPACE)
        tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    else:
        scheme = "first" if space_prefix else "never"
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(_SPACE, prepend_scheme=scheme, split=False)
        if space_prefix:
            steps.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def implied_merges(vocab: Dict[str, int], ranks: Dict[str, float]) -> List[Tuple[str, str]]:
    """Every ``(left, right)`` with ``left``, ``right`` and ``left + right`` in ``vocab``, best
    ``ranks[left + right]`` first; ties by the shorter left piece, then the shorter right one
    (reversed, as the score order), splits of one piece by their ids. Quadratic in a piece's
    length: the caller caps it (MAX_PIECE)."""
    found = []
    for piece, rank in ranks.items():
        splits = [
            (piece[:cut], piece[cut:])
            for cut in range(1, len(piece))
            if piece[:cut] in vocab and piece[cut:] in vocab
        ]
        splits.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        found.extend((left, right, rank) for left, right in splits)
    found.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in found]
