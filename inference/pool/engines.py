"""The engine the pool loads for a model folder, by its kind, what its weights weigh, and how
the pool stops it."""

from __future__ import annotations

import logging

from .discovery import ModelFolder

logger = logging.getLogger("omlx.models")


def make_engine(folder: ModelFolder, engine_settings: dict):
    """A text engine for an LLM; the batching encoder engine for embedding and reranker models."""
    if folder.kind == "llm":
        from django.conf import settings

        if getattr(settings, "OMLX_DISTRIBUTED", None):  # split across machines: inference.distributed
            from inference.distributed.serving import distributed_engine

            return distributed_engine(folder.path, engine_settings)
        from inference.engine import Engine

        return Engine(folder.path, **engine_settings)
    from inference.embedding.engine import EncoderEngine

    return EncoderEngine(
        folder.path,
        folder.kind,
        max_batch_wait_ms=engine_settings.get("max_batch_wait_ms", 0),
        dtype=engine_settings.get("dtype"),
        name=folder.id,
    )


class AdapterEngine:
    """A base model's engine as a LoRA adapter's requests see it: ``submit`` runs them with the
    adapter (inference.engine.lora); everything else is the base engine's."""

    def __init__(self, engine, adapter_name: str):
        self._engine = engine
        self.adapter_name = adapter_name

    def submit(self, *args, **kwargs):
        return self._engine.submit(*args, adapter=self.adapter_name, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def weights_bytes(engine) -> int:
    """Bytes of the loaded model's parameters (run on the engine thread)."""
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(engine.loaded.model.parameters()))


def stop_engine(model_id: str, engine) -> None:
    """Write the engine's hot blocks down to the cold tier (a failure is logged: the blocks are
    lost, not the unload), close it, and give the freed memory back to the system."""
    try:
        engine.call(lambda e: getattr(e.prefix_cache, "write_down", lambda: 0)(), timeout=300)
    except Exception as exc:
        logger.warning("%s: writing hot blocks down before unloading failed: %s", model_id, exc)
    engine.close()
    try:
        from inference.engine.controls import give_back_memory

        give_back_memory()  # MLX's buffer cache and glibc's free lists go back to the system
    except Exception:
        pass
    logger.info("unloaded %s", model_id)
