"""A loaded embedding or reranker model: its tokenizer, its MLX network and what one forward pass
of a batch of token sequences gives (one embedding or one relevance score per sequence).

Two families, chosen from config.json:

- BERT-family encoders (``inference.embedding.bert``): an embedder pools the last hidden states
  (``inference.embedding.pooling``); a cross-encoder reranker (``...ForSequenceClassification``)
  scores a (query, document) pair, encoded as one sequence with token type ids, as
  sigmoid(logit) (softmax's last label for two labels).
- LLM-based models on mlx-lm's model classes (Qwen3-Embedding, Qwen3-Reranker): an embedder takes
  the hidden state of the last token (its tokenizer appends the end token), normalised; a
  reranker renders Qwen3-Reranker's judge prompt around the pair and scores
  P(yes) = softmax(logit(yes), logit(no)) at the last position.

Batches are padded on the right. Causal attention never looks right, and the encoders mask the
padding, so a sequence gets the same output in any batch (``run`` is row-for-row).
"""

from __future__ import annotations

import glob
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from inference import platform

from . import bert
from .pooling import Pooling
from .tokenizer import EncoderTokenizer

logger = logging.getLogger("omlx.embedding")

Seq = Tuple[List[int], Optional[List[int]]]  # token ids, token type ids (None: all zero)

# Qwen3-Reranker's prompt (its model card): a judge instruction in the system turn, an empty
# reasoning block, and the answer read off the next token's yes/no logits.
QWEN3_RERANK_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on "
    'the Query and the Instruct provided. Note that the answer can only be "yes" or '
    '"no".<|im_end|>\n<|im_start|>user\n'
)
QWEN3_RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_RERANK_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
MAX_TOKENS = 8192  # per sequence, as OpenAI's embeddings: attention work memory grows with its square
_DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


class EncoderLoadError(ValueError):
    """A folder that cannot be served as an embedding or reranker model; the message says why."""


def is_encoder_config(config: dict) -> bool:
    return config.get("model_type") in bert.MODEL_TYPES


@dataclass
class EncoderModel:
    path: Path
    kind: str  # "embedding" | "reranker"
    model: nn.Module
    tokenizer: EncoderTokenizer
    max_length: int  # tokens per sequence, special tokens included
    vocab_size: int
    llm_based: bool
    pooling: Optional[Pooling] = None  # embedders
    dim: Optional[int] = None  # embedders: the embedding's size
    yes_no: Optional[Tuple[int, int]] = None  # LLM rerankers: token ids of "yes" and "no"

    def __post_init__(self):
        self._lock = threading.Lock()  # tokenizers does not document one Tokenizer as thread-safe

    # -- tokenization (any thread) -------------------------------------------------------------

    def tokenize(self, texts: Sequence[str]) -> List[Seq]:
        with self._lock:
            encoded = self.tokenizer.encode(texts, add_special_tokens=True)
        return [(ids, None) for ids in encoded]

    def tokenize_pairs(
        self, query: str, documents: Sequence[str], instruction: Optional[str] = None
    ) -> List[Seq]:
        """One sequence per (query, document) pair, as the reranker reads it."""
        if self.llm_based:
            instruction = instruction or DEFAULT_RERANK_INSTRUCTION
            bodies = [f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {d}" for d in documents]
            with self._lock:
                prefix, suffix = self.tokenizer.encode(
                    [QWEN3_RERANK_PREFIX, QWEN3_RERANK_SUFFIX], add_special_tokens=False
                )
                encoded = self.tokenizer.encode(bodies, add_special_tokens=False)
            return [(prefix + ids + suffix, None) for ids in encoded]
        with self._lock:
            return self.tokenizer.encode_pairs([(query, d) for d in documents])

    # -- the forward pass (the engine thread) --------------------------------------------------

    def run(self, seqs: Sequence[Seq]) -> np.ndarray:
        """[n, dim] float32 embeddings, or [n] relevance scores, for ``seqs`` (row i is seqs[i])."""
        width = max(len(ids) for ids, _ in seqs)
        ids = np.zeros((len(seqs), width), dtype=np.int32)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for row, (tokens, type_ids) in enumerate(seqs):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
            if type_ids is not None:
                types[row, : len(type_ids)] = type_ids
        ids, types, mask = mx.array(ids), mx.array(types), mx.array(mask)
        if self.llm_based:
            hidden = self.model.model(ids)
            if self.kind == "embedding":
                out = self.pooling(hidden, mask)
            else:
                last = mask.sum(axis=1) - 1
                h = mx.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
                logits = _lm_head(self.model, h)[:, list(self.yes_no)].astype(mx.float32)
                out = mx.softmax(logits, axis=-1)[:, 0]
        elif self.kind == "embedding":
            out = self.pooling(self.model(ids, types, mask), mask)
        else:
            logits = self.model(ids, types, mask).astype(mx.float32)
            out = mx.sigmoid(logits[:, 0]) if logits.shape[-1] == 1 else mx.softmax(logits, axis=-1)[:, -1]
        mx.eval(out)
        return np.array(out, copy=True)


def load_encoder(path, kind: str, dtype: Optional[str] = None) -> EncoderModel:
    """Load the ``kind`` ("embedding" or "reranker") model in ``path``; EncoderLoadError says
    why a folder cannot be served."""
    path = Path(path).expanduser()
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise EncoderLoadError(f"{path}: config.json cannot be read: {exc}") from None
    try:
        tokenizer = EncoderTokenizer.from_folder(path)
    except Exception as exc:
        raise EncoderLoadError(f"{path}: cannot load the tokenizer: {exc}") from exc
    try:
        if is_encoder_config(config):
            model = _load_bert(path, config, kind)
        else:
            model = _load_llm(path, config, kind)
    except (ValueError, KeyError, OSError, FileNotFoundError) as exc:
        raise EncoderLoadError(f"{path}: {exc}") from exc
    dtype = dtype or platform.default_dtype()
    if dtype is not None:
        model.set_dtype(_DTYPES[dtype], predicate=lambda t: mx.issubdtype(t, mx.floating))
    mx.eval(model.parameters())
    llm_based = not is_encoder_config(config)
    encoder = EncoderModel(
        path,
        kind,
        model,
        tokenizer,
        _max_length(path, config, tokenizer),
        int(config.get("vocab_size") or len(tokenizer)),
        llm_based,
    )
    if kind == "embedding":
        try:
            encoder.pooling = Pooling.of_folder(path, llm_based)
        except (ValueError, OSError) as exc:
            raise EncoderLoadError(f"{path}: {exc}") from exc
        encoder.dim = int(encoder.run([([0], None)]).shape[-1])
    elif llm_based:
        encoder.yes_no = _yes_no_ids(path, tokenizer)
    logger.info("loaded %s (%s, %s, max %d tokens)", path, kind, config.get("model_type"), encoder.max_length)
    return encoder


def _load_bert(path: Path, config: dict, kind: str) -> nn.Module:
    args = bert.BertArgs.from_config(config)
    classifier = kind == "reranker"
    model = bert.BertClassifier(args) if classifier else bert.Bert(args)
    weights = {}
    for file in sorted(glob.glob(str(path / "*.safetensors"))):
        weights.update(mx.load(file))
    if not weights:
        raise ValueError("no weights (*.safetensors) in the folder")
    if classifier and not any(k.startswith("classifier.") for k in weights):
        raise ValueError(
            "a reranker needs a sequence classification head (classifier.*), and the weights have none"
        )
    model.load_weights(list(bert.sanitize(weights, classifier, args.model_type).items()), strict=True)
    return model


def _load_llm(path: Path, config: dict, kind: str) -> nn.Module:
    from mlx_lm.utils import _get_classes, load_model

    def classes(config):
        model_class, args_class = _get_classes(config)

        class Prefixed(model_class):
            """An embedder's checkpoint holds the base model only (``layers.0...``, no lm_head)."""

            def sanitize(self, weights):
                if not any(k.startswith("model.") for k in weights):
                    weights = {f"model.{k}": v for k, v in weights.items()}
                return super().sanitize(weights) if hasattr(model_class, "sanitize") else weights

        return Prefixed, args_class

    has_head = _has_lm_head(path)
    if kind == "reranker" and not (has_head or config.get("tie_word_embeddings")):
        raise ValueError("an LLM-based reranker needs its output layer (lm_head), and the weights have none")
    overrides = {} if has_head else {"tie_word_embeddings": True}  # no head to load: use none
    model, _ = load_model(path, model_config=overrides, get_model_classes=classes)
    if not hasattr(model, "model"):
        raise ValueError(
            f"model_type {config.get('model_type')!r}: mlx-lm's model has no base model (.model)"
        )
    return model


def _has_lm_head(path: Path) -> bool:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        return any(k.startswith("lm_head.") for k in json.loads(index.read_text()).get("weight_map", {}))
    for file in glob.glob(str(path / "*.safetensors")):
        with open(file, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if any(k.startswith("lm_head.") for k in json.loads(f.read(length))):
                return True
    return False


def _lm_head(model: nn.Module, h: mx.array) -> mx.array:
    if hasattr(model, "lm_head"):
        return model.lm_head(h)
    return model.model.embed_tokens.as_linear(h)


def _yes_no_ids(path: Path, tokenizer: EncoderTokenizer) -> Tuple[int, int]:
    ids = tuple(tokenizer.token_to_id(word) for word in ("yes", "no"))
    if None in ids:
        raise EncoderLoadError(
            f'{path}: an LLM-based reranker needs "yes" and "no" tokens '
            "(Qwen3-Reranker's scoring), and this tokenizer has none"
        )
    return ids


def _max_length(path: Path, config: dict, tokenizer: EncoderTokenizer) -> int:
    limits = []
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        # RoBERTa's positions start after the padding id: two fewer usable ones.
        roberta = config.get("model_type") in bert.ROBERTA_TYPES
        limits.append(positions - (config.get("pad_token_id", 1) + 1 if roberta else 0))
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        value = json.loads(st_config.read_text()).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            limits.append(value)
    model_max = tokenizer.model_max_length
    if model_max is not None and 0 < model_max < 10**7:
        limits.append(model_max)
    return min(limits + [MAX_TOKENS]) if limits else 512
