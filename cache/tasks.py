"""Huey tasks of the cache app: cold-tier GC every few minutes, and the records of GC passes
(GCRun rows) that the admin console's Cache page shows.

``run`` is the one entry point: a GC pass over the settings' cold-cache root, recorded with its
trigger ("periodic" from the Huey task, "manual" from the Cache page). Only the newest
``GCRun.KEEP`` rows are kept. Recording is best effort: a failed insert is logged, never raised
into the GC pass that already happened.
"""

from __future__ import annotations

import logging
import time
from typing import List, Optional

from django.conf import settings
from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from .gc import GCResult, collect
from .models import GCRun
from .orm_index import to_datetime

logger = logging.getLogger("omlx.cache.gc")

TRIGGERS = ("periodic", "manual")


def run(trigger: str = "periodic") -> Optional[GCResult]:
    """One GC pass over OMLX_COLD_CACHE_DIR with the cap and TTL from settings, recorded; None
    when the cold tier is off."""
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger={trigger!r}: must be one of {', '.join(TRIGGERS)}")
    root = settings.OMLX_COLD_CACHE_DIR
    if root is None:
        return None
    started = time.time()
    result = collect(
        root,
        getattr(settings, "OMLX_COLD_CACHE_MAX_BYTES", None),
        getattr(settings, "OMLX_COLD_CACHE_TTL_SECONDS", None),
    )
    record(result, trigger, started)
    return result


def record(result: GCResult, trigger: str, started: float) -> None:
    """Store one pass and drop the rows beyond the newest GCRun.KEEP."""
    try:
        GCRun.objects.create(
            started=to_datetime(started),
            seconds=result.seconds,
            files=result.files,
            bytes=result.bytes,
            expired=result.expired,
            evicted=result.evicted,
            removed_bytes=result.removed_bytes,
            stale_rows=result.stale_rows,
            trigger=trigger,
        )
        old = GCRun.objects.order_by("-started", "-id").values_list("id", flat=True)[GCRun.KEEP :]
        stale = list(old[:1000])
        if stale:
            GCRun.objects.filter(id__in=stale).delete()
    except Exception as err:  # noqa: BLE001 - the pass happened; only its record is lost
        logger.warning("cold GC: cannot record the run: %s", err)


def recent(limit: int = 20) -> List[GCRun]:
    return list(GCRun.objects.order_by("-started", "-id")[:limit])


@db_periodic_task(crontab(minute="*/5"))
def collect_cold_cache() -> None:
    """Returns None so that Huey stores no result for a periodic task."""
    run("periodic")
