"""The engine the pool loads for a model folder, by its kind, and what its weights weigh."""
from __future__ import annotations

from .discovery import ModelFolder


def make_engine(folder: ModelFolder, engine_settings: dict):
    """A text engine for an LLM; the batching encoder engine for embedding and reranker models."""
    if folder.kind == "llm":
        from inference.engine import Engine

        return Engine(folder.path, **engine_settings)
    from inference.embedding.engine import EncoderEngine

    return EncoderEngine(folder.path, folder.kind, max_batch_wait_ms=engine_settings.get("max_batch_wait_ms", 0),
                         dtype=engine_settings.get("dtype"), name=folder.id)


def weights_bytes(engine) -> int:
    """Bytes of the loaded model's parameters (run on the engine thread)."""
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(engine.loaded.model.parameters()))
