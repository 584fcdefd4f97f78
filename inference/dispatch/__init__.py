"""How an API request's job reaches a worker: one backend per process, chosen from settings once,
as Django chooses a session engine.

    settings                                backend
    OMLX_API_HANDOFF = "direct"             ``DirectBackend``: a thread of this process, no queue
    OMLX_REDIS_URL set                      ``RedisBackend``: Huey in Redis, workers anywhere
    otherwise (the embedded default)        ``HueyBackend``: Huey in SQLite, consumer in the server

Callers ask the backend (``get_backend()``): ``available``, ``submit``, ``abort``, and whether
this process runs models. Admission (429/503) stays with the API (inference/api/common/limits.py).
"""

from __future__ import annotations

import threading
from typing import Optional

from django.core.signals import setting_changed

from .base import DispatchBackend, NoWorker

__all__ = ["DispatchBackend", "NoWorker", "get_backend"]

SETTINGS = ("OMLX_API_HANDOFF", "OMLX_REDIS_URL", "OMLX_HUEY_WORKERS")

_backend: Optional[DispatchBackend] = None
_lock = threading.Lock()


def get_backend() -> DispatchBackend:
    """The process's dispatch backend (built from settings on first use)."""
    global _backend
    with _lock:
        if _backend is None:
            _backend = _choose()
        return _backend


def _choose() -> DispatchBackend:
    from django.conf import settings

    if settings.OMLX_API_HANDOFF == "direct":
        from .direct import DirectBackend

        return DirectBackend()
    if settings.OMLX_REDIS_URL:
        from .redis import RedisBackend

        return RedisBackend()
    from .huey import HueyBackend

    return HueyBackend()


def _settings_changed(setting: str, **kwargs) -> None:
    """Tests change the settings with override_settings: the next request chooses again."""
    global _backend
    if setting in SETTINGS:
        with _lock:
            _backend = None


setting_changed.connect(_settings_changed)
