"""POST /v1/embeddings (OpenAI's format) and POST /v1/rerank (the Cohere / Jina shape).

Both hand token sequences to the model's ``EncoderEngine`` (``inference.embedding.engine``),
which batches concurrent requests into shared forward passes. The model comes from the model
pool like a chat model (memory limit, pin, TTL, LRU). Embedding models run in the server
process (the pool there loads them), not through the Huey queue: a request is one forward pass,
with nothing to stream.

Bad input is a 400 naming the field: an empty input, text or token ids beyond the model's
length (never silently cut), token ids outside the vocabulary, an unknown encoding_format,
``dimensions`` out of range, a model of the wrong kind (a chat model here, an embedding model
on /v1/rerank).
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any, List, Optional, Union

import numpy as np
from asgiref.sync import sync_to_async
from ninja import Router, Schema
from pydantic import ConfigDict, Field

from inference import lifecycle
from inference.api.common.auth import check_api_key
from inference.keys import scopes
from inference.api.common.errors import ApiError
from inference.pool import get_pool

router = Router(tags=["Embeddings"])

MAX_INPUTS = 2048  # texts per embeddings request (OpenAI's limit)
MAX_DOCUMENTS = 4096


class EmbeddingRequest(Schema):
    model_config = ConfigDict(extra="allow")
    model: str
    input: Any = Field(
        ..., description="a string, a list of strings, a list of token ids, or a list of those"
    )
    encoding_format: Any = "float"
    dimensions: Any = None
    user: Optional[str] = None


class RerankDocument(Schema):
    model_config = ConfigDict(extra="allow")
    text: str


class RerankRequest(Schema):
    model_config = ConfigDict(extra="allow")
    model: str
    query: str
    documents: List[Union[str, RerankDocument]]
    top_n: Optional[int] = None
    return_documents: bool = False
    instruction: Optional[str] = None  # LLM-based rerankers (Qwen3-Reranker): the task description


@router.post("/embeddings")
async def embeddings(request, body: EmbeddingRequest):
    check_api_key(request, scopes.INFERENCE)
    inputs = _inputs(body.input)
    encoding_format = body.encoding_format or "float"
    if encoding_format not in ("float", "base64"):
        raise ApiError(
            400,
            f"encoding_format: {body.encoding_format!r} is not one of 'float', 'base64'",
            param="encoding_format",
        )
    dims = body.dimensions
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise ApiError(400, f"dimensions: {dims!r} must be an integer >= 1", param="dimensions")

    def prepare(model):
        if dims is not None and dims > model.dim:
            raise ApiError(
                400, f"dimensions: {dims} is more than the model's {model.dim}", param="dimensions"
            )
        texts = [i for i, x in enumerate(inputs) if isinstance(x, str)]
        seqs: List = [None] * len(inputs)
        for i, seq in zip(texts, model.tokenize([inputs[i] for i in texts]) if texts else []):
            seqs[i] = seq
        for i, x in enumerate(inputs):
            if seqs[i] is None:
                bad = [t for t in x if not 0 <= t < model.vocab_size]
                if bad:
                    raise ApiError(
                        400,
                        f"input[{i}]: token id {bad[0]} is outside the vocabulary [0, {model.vocab_size})",
                        param="input",
                    )
                seqs[i] = (list(x), None)
            _check_length(seqs[i], model, f"input[{i}]", "input")
        return seqs

    rows, seqs = await _run(body.model, "embedding", prepare)
    if dims is not None:
        rows = rows[:, :dims]
        rows = rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-12)
    data = [
        {"object": "embedding", "index": i, "embedding": _encode(row, encoding_format)}
        for i, row in enumerate(rows)
    ]
    tokens = sum(len(ids) for ids, _ in seqs)
    return {
        "object": "list",
        "data": data,
        "model": body.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@router.post("/rerank")
async def rerank(request, body: RerankRequest):
    check_api_key(request, scopes.INFERENCE)
    if not body.query.strip():
        raise ApiError(400, "query: must not be empty", param="query")
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    if not documents:
        raise ApiError(400, "documents: must not be empty", param="documents")
    if len(documents) > MAX_DOCUMENTS:
        raise ApiError(
            400,
            f"documents: {len(documents)} documents; at most {MAX_DOCUMENTS} per request",
            param="documents",
        )
    if body.top_n is not None and body.top_n < 1:
        raise ApiError(400, f"top_n: {body.top_n} must be >= 1", param="top_n")

    def prepare(model):
        seqs = model.tokenize_pairs(body.query, documents, body.instruction)
        for i, seq in enumerate(seqs):
            _check_length(seq, model, f"the query with documents[{i}]", "documents")
        return seqs

    scores, seqs = await _run(body.model, "reranker", prepare)
    order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))  # stable: ties keep input order
    results = []
    for i in order[: body.top_n or len(order)]:
        result = {"index": i, "relevance_score": float(scores[i])}
        if body.return_documents:
            result["document"] = {"text": documents[i]}
        results.append(result)
    tokens = sum(len(ids) for ids, _ in seqs)
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": body.model,
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def _run(name: str, kind: str, prepare):
    """Lease ``name``'s engine, build its sequences with ``prepare(model)`` and run them; the
    result rows (in order) and the sequences."""
    if lifecycle.shutting_down():
        raise ApiError(503, "The server is shutting down", code="server_shutting_down")
    _check_kind(name, kind)
    future, seqs = await sync_to_async(_submit, thread_sensitive=False)(name, prepare)
    try:
        rows = await asyncio.wrap_future(future)
    except RuntimeError as exc:  # the engine was closed under the request (shutdown)
        raise ApiError(503, f"The model '{name}' was unloaded: {exc}") from None
    return rows, seqs


def _submit(name: str, prepare):
    from inference.embedding.encoder_model import EncoderLoadError
    from inference.pool import InsufficientMemory, ModelUnavailable

    pool = get_pool()
    try:
        with pool.lease(name) as engine:
            seqs = prepare(engine.loaded)
            return engine.submit(seqs), seqs
    except ModelUnavailable as exc:
        raise ApiError(404, str(exc), param="model", code="model_not_found") from None
    except KeyError:
        raise ApiError(404, pool.not_found_message(name), param="model", code="model_not_found") from None
    except InsufficientMemory as exc:
        raise ApiError(507, str(exc)) from None
    except EncoderLoadError as exc:
        raise ApiError(500, f"The model '{name}' cannot be loaded: {exc}") from None


def _check_kind(name: str, kind: str) -> None:
    pool = get_pool()
    actual = pool.kind(name)
    if actual is None:
        raise ApiError(404, pool.not_found_message(name), param="model", code="model_not_found")
    if actual != kind:
        what = {
            "llm": "a chat (text generation) model",
            "embedding": "an embedding model",
            "reranker": "a reranker model",
        }[actual]
        use = {"llm": "/v1/chat/completions", "embedding": "/v1/embeddings", "reranker": "/v1/rerank"}[actual]
        wanted = "an embedding" if kind == "embedding" else "a reranker"
        raise ApiError(
            400,
            f"The model '{name}' is {what}, not {wanted} model (use {use})",
            param="model",
            code="wrong_model_type",
        )


def _inputs(value) -> List[Union[str, List[int]]]:
    """The request's inputs as a list of texts and token id lists; ApiError 400 otherwise."""

    def is_ids(x):
        return isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)

    if isinstance(value, str) or (is_ids(value) and value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ApiError(
            400,
            "input: must be a non-empty string, list of strings, list of token ids or list of token id lists",
            param="input",
        )
    if len(value) > MAX_INPUTS:
        raise ApiError(400, f"input: {len(value)} inputs; at most {MAX_INPUTS} per request", param="input")
    for i, x in enumerate(value):
        if not (isinstance(x, str) or is_ids(x)):
            raise ApiError(400, f"input[{i}]: must be a string or a list of token ids", param="input")
        if not x:
            raise ApiError(400, f"input[{i}]: is empty", param="input")
    return value


def _check_length(seq, model, what: str, param: str) -> None:
    if len(seq[0]) > model.max_length:
        raise ApiError(
            400,
            f"{what} has {len(seq[0])} tokens; the model takes at most {model.max_length}",
            param=param,
            code="context_length_exceeded",
        )


def _encode(row: np.ndarray, encoding_format: str):
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in row]
