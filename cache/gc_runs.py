"""Records of cold-tier GC passes (GCRun rows), for the admin console's Cache page.

``run`` is the one entry point: a GC pass over the settings' cold-cache root, recorded with its
trigger ("periodic" from the Huey task, "manual" from the Cache page). Only the newest
``GCRun.KEEP`` rows are kept. Recording is best effort: a failed insert is logged, never raised
into the GC pass that already happened.
"""
from __future__ import annotations

import logging
import time
from typing import List, Optional

from . import cold_rows
from .gc import GCResult, collect

logger = logging.getLogger("omlx.cache.gc")

TRIGGERS = ("periodic", "manual")


def run(trigger: str = "periodic") -> Optional[GCResult]:
    """One GC pass over OMLX_COLD_CACHE_DIR with the cap and TTL from settings, recorded; None
    when the cold tier is off."""
    from django.conf import settings

    if trigger not in TRIGGERS:
        raise ValueError(f"trigger={trigger!r}: must be one of {', '.join(TRIGGERS)}")
    root = settings.OMLX_COLD_CACHE_DIR
    if root is None:
        return None
    started = time.time()
    result = collect(root, getattr(settings, "OMLX_COLD_CACHE_MAX_BYTES", None),
                     getattr(settings, "OMLX_COLD_CACHE_TTL_SECONDS", None))
    record(result, trigger, started)
    return result


def record(result: GCResult, trigger: str, started: float) -> None:
    """Store one pass and drop the rows beyond the newest GCRun.KEEP."""
    if not cold_rows.ensure_django():
        return
    from .models import GCRun

    try:
        GCRun.objects.create(
            started=cold_rows.to_datetime(started), seconds=result.seconds, files=result.files,
            bytes=result.bytes, expired=result.expired, evicted=result.evicted,
            removed_bytes=result.removed_bytes, stale_rows=result.stale_rows, trigger=trigger)
        old = GCRun.objects.order_by("-started", "-id").values_list("id", flat=True)[GCRun.KEEP:]
        stale = list(old[:1000])
        if stale:
            GCRun.objects.filter(id__in=stale).delete()
    except Exception as err:  # noqa: BLE001 - the pass happened; only its record is lost
        logger.warning("cold GC: cannot record the run: %s", err)


def recent(limit: int = 20) -> List["GCRun"]:  # noqa: F821
    from .models import GCRun

    return list(GCRun.objects.order_by("-started", "-id")[:limit])
