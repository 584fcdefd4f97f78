"""The model pool: discovery (``discovery``), memory estimates and limits (``memory``), per-model
settings (``model_settings``), the pool of loaded engines (``pool``) and which engine a folder
gets (``engines``: the text engine for LLMs, the batching encoder engine for embedding and
reranker models). docs/models.md tells users how it behaves."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from .other_apps import OtherApps
from .pool import InsufficientMemory, ModelBusy, ModelPool, ModelUnavailable

__all__ = [
    "InsufficientMemory",
    "ModelBusy",
    "ModelPool",
    "ModelUnavailable",
    "close_pool",
    "current_pool",
    "get_pool",
]

_pool: Optional[ModelPool] = None
_pool_lock = threading.Lock()


def get_pool() -> ModelPool:
    """The process's pool, built from settings (OMLX_MODEL_DIRS, OMLX_HF_CACHE, OMLX_LMSTUDIO_MODELS,
    OMLX_OLLAMA_MODELS, OMLX_MAX_MODEL_MEMORY, OMLX_MAX_PROCESS_MEMORY and the engine settings)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from django.conf import settings

            from .memory import auto_process_limit, parse_limit

            cold = settings.OMLX_COLD_CACHE_DIR
            dirs = list(getattr(settings, "OMLX_MODEL_DIRS", None) or [settings.OMLX_MODEL_DIR])
            if Path(dirs[0]) != Path(settings.OMLX_MODEL_DIR):  # OMLX_MODEL_DIR alone was overridden
                dirs = [settings.OMLX_MODEL_DIR]
            _pool = ModelPool(
                dirs,
                {
                    "max_concurrent_requests": settings.OMLX_MAX_CONCURRENT_REQUESTS,
                    "max_batch_wait_ms": settings.OMLX_MAX_BATCH_WAIT_MS,
                    "max_step_ms": settings.OMLX_MAX_STEP_MS,
                    "step_trace": settings.OMLX_STEP_TRACE,
                    "speculative": settings.OMLX_SPECULATIVE,
                    "num_draft_tokens": settings.OMLX_NUM_DRAFT_TOKENS,
                    "hot_cache_max_size": settings.OMLX_HOT_CACHE_MAX_SIZE,
                    "kv_bits": settings.OMLX_KV_BITS,
                    "kv_group_size": settings.OMLX_KV_GROUP_SIZE,
                    "paged_ssd_cache_bits": settings.OMLX_PAGED_SSD_CACHE_BITS,
                    "paged_ssd_cache_dir": str(cold) if cold is not None else None,
                },
                max_model_memory=parse_limit(settings.OMLX_MAX_MODEL_MEMORY, "max_model_memory"),
                max_process_memory=parse_limit(
                    settings.OMLX_MAX_PROCESS_MEMORY, "max_process_memory", auto=auto_process_limit()
                ),
                hf_cache_dir=getattr(settings, "OMLX_HF_CACHE", None),
                draft_model=getattr(settings, "OMLX_DRAFT_MODEL", None),
                other_apps=OtherApps.from_settings(
                    getattr(settings, "OMLX_LMSTUDIO_MODELS", None),
                    getattr(settings, "OMLX_OLLAMA_MODELS", None),
                ),
            )
        return _pool


def current_pool() -> Optional[ModelPool]:
    """The process's pool if it was built (None: `get_pool` builds it from settings when asked)."""
    return _pool


def close_pool() -> None:
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()
