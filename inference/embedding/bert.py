"""A BERT-family encoder in MLX, with Hugging Face's parameter names so a checkpoint loads as is.

Covers ``bert`` and the RoBERTa variants (``roberta``, ``xlm-roberta``, ``camembert``: position
ids counted from ``pad_token_id + 1`` over the non-padding tokens). ``Bert`` returns the last
hidden states; ``BertClassifier`` adds the pooler and the ``classifier`` head of
``...ForSequenceClassification`` (a cross-encoder reranker): one logit row per sequence.

Invariant: with an attention mask, the output rows of a sequence's real tokens do not depend on
the padding that follows it (padded keys get a large negative score), so a batch of mixed
lengths gives every sequence what it gets alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import BERT_MODEL_TYPES as MODEL_TYPES

ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")
_ACTIVATIONS = {
    "gelu": nn.gelu,
    "gelu_new": nn.gelu_approx,
    "gelu_pytorch_tanh": nn.gelu_approx,
    "relu": nn.relu,
    "silu": nn.silu,
}


@dataclass
class BertArgs:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    num_labels: int = 1

    @classmethod
    def from_config(cls, config: dict) -> "BertArgs":
        if config.get("model_type") not in MODEL_TYPES:
            raise ValueError(
                f"model_type {config.get('model_type')!r} is not a BERT-family encoder "
                f"omlx knows ({', '.join(MODEL_TYPES)})"
            )
        if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
            raise ValueError(f"hidden_act {config['hidden_act']!r} is not supported")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        labels = config.get("num_labels") or len(config.get("id2label") or {}) or 1
        fields = {k: config[k] for k in cls.__dataclass_fields__ if k in config and config[k] is not None}
        return cls(**dict(fields, num_labels=labels))


class _Embeddings(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.word_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
        self.position_embeddings = nn.Embedding(args.max_position_embeddings, args.hidden_size)
        self.token_type_embeddings = nn.Embedding(args.type_vocab_size, args.hidden_size)
        self.LayerNorm = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)
        self.roberta = args.model_type in ROBERTA_TYPES
        self.pad = args.pad_token_id

    def __call__(self, ids, type_ids, mask):
        if self.roberta:  # positions count real tokens from pad + 1; padding sits at pad
            positions = (mx.cumsum(mask, axis=1) * mask).astype(mx.int32) + self.pad
        else:
            positions = mx.broadcast_to(mx.arange(ids.shape[1])[None], ids.shape)
        h = (
            self.word_embeddings(ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(type_ids)
        )
        return self.LayerNorm(h)


class _SelfAttention(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.query = nn.Linear(args.hidden_size, args.hidden_size)
        self.key = nn.Linear(args.hidden_size, args.hidden_size)
        self.value = nn.Linear(args.hidden_size, args.hidden_size)
        self.heads = args.num_attention_heads

    def __call__(self, h, bias):
        b, n, _ = h.shape

        def split(x):
            return x.reshape(b, n, self.heads, -1).transpose(0, 2, 1, 3)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5, mask=bias)
        return out.transpose(0, 2, 1, 3).reshape(b, n, -1)


class _DenseNorm(nn.Module):
    """``dense`` then residual add then ``LayerNorm`` (BERT's ``...Output`` blocks)."""

    def __init__(self, dims_in: int, args: BertArgs):
        super().__init__()
        self.dense = nn.Linear(dims_in, args.hidden_size)
        self.LayerNorm = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)

    def __call__(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        setattr(self, "self", _SelfAttention(args))  # HF's name: attention.self.query...
        self.output = _DenseNorm(args.hidden_size, args)

    def __call__(self, h, bias):
        return self.output(getattr(self, "self")(h, bias), h)


class _Intermediate(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.dense = nn.Linear(args.hidden_size, args.intermediate_size)
        self.act = _ACTIVATIONS[args.hidden_act]

    def __call__(self, h):
        return self.act(self.dense(h))


class _Layer(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.attention = _Attention(args)
        self.intermediate = _Intermediate(args)
        self.output = _DenseNorm(args.intermediate_size, args)

    def __call__(self, h, bias):
        h = self.attention(h, bias)
        return self.output(self.intermediate(h), h)


class _Encoder(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.layer = [_Layer(args) for _ in range(args.num_hidden_layers)]


class Bert(nn.Module):
    """The encoder: ``(ids, type_ids, mask)`` [batch, length] -> hidden states [batch, length, hidden]."""

    def __init__(self, args: BertArgs):
        super().__init__()
        self.args = args
        self.embeddings = _Embeddings(args)
        self.encoder = _Encoder(args)

    def __call__(self, ids: mx.array, type_ids: Optional[mx.array], mask: mx.array) -> mx.array:
        if type_ids is None:
            type_ids = mx.zeros_like(ids)
        h = self.embeddings(ids, type_ids, mask)
        bias = ((1 - mask.astype(h.dtype)) * -1e9)[:, None, None, :].astype(h.dtype)
        for layer in self.encoder.layer:
            h = layer(h, bias)
        return h


class _Pooler(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.dense = nn.Linear(args.hidden_size, args.hidden_size)

    def __call__(self, h):
        return mx.tanh(self.dense(h[:, 0]))


class _RobertaHead(nn.Module):
    """RoBERTa's classification head: dense + tanh over the first token, then out_proj."""

    def __init__(self, args: BertArgs):
        super().__init__()
        self.dense = nn.Linear(args.hidden_size, args.hidden_size)
        self.out_proj = nn.Linear(args.hidden_size, args.num_labels)

    def __call__(self, h):
        return self.out_proj(mx.tanh(self.dense(h[:, 0])))


class BertClassifier(nn.Module):
    """``...ForSequenceClassification``: -> logits [batch, num_labels]."""

    def __init__(self, args: BertArgs):
        super().__init__()
        self.roberta_head = args.model_type in ROBERTA_TYPES
        setattr(self, "roberta" if self.roberta_head else "bert", Bert(args))
        if self.roberta_head:
            self.classifier = _RobertaHead(args)
        else:
            self.pooler_head = _Pooler(args)
            self.classifier = nn.Linear(args.hidden_size, args.num_labels)

    @property
    def encoder_model(self) -> Bert:
        return self.roberta if self.roberta_head else self.bert

    def __call__(self, ids, type_ids, mask):
        h = self.encoder_model(ids, type_ids, mask)
        if self.roberta_head:
            return self.classifier(h)
        return self.classifier(self.pooler_head(h))


def sanitize(weights: dict, classifier: bool, model_type: str) -> dict:
    """Checkpoint names -> this module's: old ``gamma``/``beta`` LayerNorm names, the ``bert.`` /
    ``roberta.`` prefix present or not, the pooler moved beside the classifier, buffers dropped."""
    prefix = "roberta." if model_type in ROBERTA_TYPES else "bert."
    out = {}
    for name, value in weights.items():
        if name.endswith(("position_ids", "token_type_ids")) or name.startswith(("cls.", "lm_head.")):
            continue
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if name.startswith(prefix):
            name = name[len(prefix) :]
        if name.startswith("pooler."):
            if not classifier:
                continue  # sentence embeddings never use the pooler
            out["pooler_head." + name[len("pooler.") :]] = value
            continue
        if classifier and not name.startswith("classifier."):
            name = prefix + name
        out[name] = value
    return out
