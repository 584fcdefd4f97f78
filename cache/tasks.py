"""Huey tasks of the cache app: cold-tier GC every few minutes."""
from __future__ import annotations

import logging

from django.conf import settings
from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from .gc import GCResult, collect

logger = logging.getLogger("omlx.cache.gc")


def collect_from_settings() -> GCResult:
    """One GC pass over OMLX_COLD_CACHE_DIR with the cap and TTL from settings."""
    root = settings.OMLX_COLD_CACHE_DIR
    if root is None:
        return GCResult()
    return collect(root, getattr(settings, "OMLX_COLD_CACHE_MAX_BYTES", None),
                   getattr(settings, "OMLX_COLD_CACHE_TTL_SECONDS", None))


@db_periodic_task(crontab(minute="*/5"))
def collect_cold_cache() -> None:
    """Returns None so that Huey stores no result for a periodic task."""
    collect_from_settings()
