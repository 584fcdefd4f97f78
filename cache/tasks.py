"""Huey tasks of the cache app: cold-tier GC every few minutes, recorded (cache/gc_runs.py)."""
from __future__ import annotations

import logging

from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from . import gc_runs
from .gc import GCResult

logger = logging.getLogger("omlx.cache.gc")


def collect_from_settings(trigger: str = "periodic") -> GCResult:
    """One recorded GC pass over OMLX_COLD_CACHE_DIR with the cap and TTL from settings."""
    return gc_runs.run(trigger) or GCResult()


@db_periodic_task(crontab(minute="*/5"))
def collect_cold_cache() -> None:
    """Returns None so that Huey stores no result for a periodic task."""
    collect_from_settings()
