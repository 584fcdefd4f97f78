"""The model pool's way to a distributed engine (inference.pool.engines, with OMLX_DISTRIBUTED):
the process's group, started with the first model, and the engine on it."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from .engine import DistributedEngine
from .group import shared_group


def distributed_engine(model_path, engine_settings: dict) -> DistributedEngine:
    dirs = list(getattr(settings, "OMLX_MODEL_DIRS", None) or [settings.OMLX_MODEL_DIR])
    logs = Path(settings.OMLX_LOG_DIR or Path(settings.OMLX_HOME) / "logs")
    cache_dir = engine_settings.get("paged_ssd_cache_dir")
    timeout = getattr(settings, "OMLX_DISTRIBUTED_TIMEOUT", None)
    group = shared_group(settings.OMLX_DISTRIBUTED, dirs, logs, cache_dir, timeout)
    return DistributedEngine(Path(model_path), group, **engine_settings)
