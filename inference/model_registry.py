"""The models the server offers, and their engines (loaded on first use).

A minimal stand-in for the model pool of a later issue: no memory limit, no TTL, no unloading.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Dict, List, Optional

logger = logging.getLogger("omlx.models")


def discover_models(model_dir: Path) -> Dict[str, Path]:
    """Model folders directly inside ``model_dir`` (a ``config.json`` and ``*.safetensors``),
    by id (the folder name), sorted by id."""
    found = {}
    if model_dir.is_dir():
        for path in sorted(model_dir.iterdir()):
            if (path / "config.json").is_file() and any(path.glob("*.safetensors")):
                found[path.name] = path
    return found


class ModelRegistry:
    """Model ids -> folders -> engines.

    Invariants: at most one Engine per id; concurrent first requests for one id load it once
    (a lock per id), and a failed load is retried by the next request. With no model folder in
    ``model_dir`` the registry offers the built-in demo model alone.
    """

    def __init__(self, model_dir, engine_settings: Optional[dict] = None):
        self.model_dir = Path(model_dir).expanduser()
        self.engine_settings = dict(engine_settings or {})
        self._engines: Dict[str, object] = {}
        self._locks: Dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False

    def models(self) -> Dict[str, Path]:
        """Every model id on offer -> its folder (the folder is rescanned each call)."""
        found = discover_models(self.model_dir)
        if found:
            return found
        from inference.demo_model import DEMO_MODEL_NAME, demo_model_path

        return {DEMO_MODEL_NAME: demo_model_path()}

    def ids(self) -> List[str]:
        return list(self.models())

    def path(self, model_id: str) -> Optional[Path]:
        return self.models().get(model_id)

    def engine(self, model_id: str):
        """The Engine of ``model_id``, loaded now if needed. KeyError for an unknown id;
        ModelLoadError when the folder cannot be served."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            engine = self._engines.get(model_id)
            if engine is not None:
                return engine
            lock = self._locks.setdefault(model_id, threading.Lock())
        with lock:
            with self._lock:
                engine = self._engines.get(model_id)
            if engine is not None:
                return engine
            path = self.path(model_id)
            if path is None:
                raise KeyError(model_id)
            from inference.engine import Engine

            logger.info("loading %s from %s", model_id, path)
            engine = Engine(path, **self.engine_settings)
            with self._lock:
                if self._closed:
                    engine.close()
                    raise RuntimeError("the server is shutting down")
                self._engines[model_id] = engine
            return engine

    def loaded(self, model_id: str):
        """The Engine of ``model_id`` if it is loaded, else None (never loads)."""
        with self._lock:
            return self._engines.get(model_id)

    def close(self) -> None:
        """Close every engine; later calls to ``engine`` raise."""
        with self._lock:
            self._closed = True
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()


_registry: Optional[ModelRegistry] = None
_registry_lock = threading.Lock()


def get_registry() -> ModelRegistry:
    """The process's registry, built from settings (OMLX_MODEL_DIR, OMLX_MAX_CONCURRENT_REQUESTS,
    OMLX_HOT_CACHE_MAX_SIZE, OMLX_COLD_CACHE_DIR)."""
    global _registry
    with _registry_lock:
        if _registry is None:
            from django.conf import settings

            cold = settings.OMLX_COLD_CACHE_DIR
            _registry = ModelRegistry(settings.OMLX_MODEL_DIR, {
                "max_concurrent_requests": settings.OMLX_MAX_CONCURRENT_REQUESTS,
                "hot_cache_max_size": settings.OMLX_HOT_CACHE_MAX_SIZE,
                "paged_ssd_cache_dir": str(cold) if cold is not None else None,
            })
        return _registry


def close_registry() -> None:
    global _registry
    with _registry_lock:
        registry, _registry = _registry, None
    if registry is not None:
        registry.close()
