"""The Django implementation of the cold tier's index (cache/cold_index.py): CacheBlock rows.

cache/apps.py installs ``OrmColdIndex`` when Django starts (the server, the Huey worker, tests).
A plain script that wants rows (an engine with a cold tier, `omlx cache`, a test's writer
process) calls ``setup()``: it starts Django if nobody has (DJANGO_SETTINGS_MODULE defaults to
omlx_site.settings), applies unapplied migrations once, and installs the index.
Rows hold aware UTC datetimes; the protocol speaks POSIX seconds.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timezone
from typing import Dict, Iterable, List, Optional, Tuple

from django.db import connection, connections, transaction
from django.db.models import Count, Max, Sum

from . import cold_index
from .cold_index import Row

logger = logging.getLogger("omlx.cache.cold")

_CHUNK = 500  # rows per statement (SQLite limits the number of bound variables)
_ready_lock = threading.Lock()
_migrated = False


def setup() -> bool:
    """Make the ORM usable in this process and the index installed; False (after a warning) if
    the database is not.

    In the server and under pytest-django, Django is already set up and this only checks. In a
    plain script it runs django.setup() and applies unapplied migrations to the database in use,
    once per process.
    """
    global _migrated
    try:
        from django.apps import apps

        if not apps.ready:
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")
            import django

            django.setup()
        with _ready_lock:
            if not _migrated:
                from django.core.management import call_command
                from django.db.migrations.executor import MigrationExecutor

                executor = MigrationExecutor(connection)
                if executor.migration_plan(executor.loader.graph.leaf_nodes()):
                    call_command("migrate", interactive=False, verbosity=0)
                _migrated = True
        if cold_index.installed() is None:
            cold_index.install(OrmColdIndex())
        return True
    except Exception as e:  # noqa: BLE001 - any failure means "no rows", never "no cache"
        logger.warning("cold tier: database unavailable (%s); block files are used without rows", e)
        return False


def to_datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


class OrmColdIndex:
    """``ColdIndex`` over the CacheBlock table (cache/models.py). Made once the apps are ready."""

    def __init__(self):
        from .models import CacheBlock

        self.table = CacheBlock

    def rows_for(self, fingerprint: str) -> Dict[str, Row]:
        return {r.key: r for r in _rows(self.table.objects.filter(model_fingerprint=fingerprint))}

    def usage(self) -> Dict[str, Tuple[str, str, float]]:
        rows = self.table.objects.order_by().values_list("key", "parent", "model_fingerprint", "last_used")
        return {key: (parent, fp, last_used.timestamp()) for key, parent, fp, last_used in rows}

    def totals(self) -> Dict[str, Tuple[int, int, int, Optional[float]]]:
        totals = (
            self.table.objects.order_by()
            .values("model_fingerprint")
            .annotate(n=Count("key"), b=Sum("bytes"), t=Sum("token_count"), last=Max("last_used"))
        )
        return {
            r["model_fingerprint"]: (
                r["n"],
                r["b"] or 0,
                r["t"] or 0,
                r["last"].timestamp() if r["last"] else None,
            )
            for r in totals
        }

    def insert(self, rows: Iterable[Row]) -> None:
        rows = list(rows)
        if connection.vendor != "sqlite":
            objs = [
                self.table(
                    key=r.key,
                    parent=r.parent,
                    model_fingerprint=r.fingerprint,
                    token_count=r.token_count,
                    token_ids=r.token_ids,
                    tier=self.table.TIER_COLD,
                    file=r.file,
                    bytes=r.bytes,
                    kv_bytes=r.kv_bytes,
                    created=to_datetime(r.created),
                    last_used=to_datetime(r.last_used),
                )
                for r in rows
            ]
            self.table.objects.bulk_create(objs, batch_size=_CHUNK, ignore_conflicts=True)
            return
        # SQLite: one prepared statement for all rows, ~10x faster than bulk_create's per-field work
        # (re-indexing thousands of files after a lost database stays well under a second).
        columns = (
            "key",
            "parent",
            "model_fingerprint",
            "token_count",
            "token_ids",
            "tier",
            "file",
            "bytes",
            "kv_bytes",
            "created",
            "last_used",
        )
        sql = (
            f'INSERT OR IGNORE INTO "{self.table._meta.db_table}" ({", ".join(columns)}) '
            f"VALUES ({', '.join(['%s'] * len(columns))})"
        )
        adapt = connection.ops.adapt_datetimefield_value
        params = [
            (
                r.key,
                r.parent,
                r.fingerprint,
                r.token_count,
                r.token_ids,
                self.table.TIER_COLD,
                r.file,
                r.bytes,
                r.kv_bytes,
                adapt(to_datetime(r.created)),
                adapt(to_datetime(r.last_used)),
            )
            for r in rows
        ]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, params)

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        with transaction.atomic():
            for chunk in _chunks(keys):
                self.table.objects.filter(key__in=chunk).delete()

    def touch(self, last_used: Dict[str, float]) -> None:
        objs = [self.table(key=k, last_used=to_datetime(t)) for k, t in last_used.items()]
        with transaction.atomic():
            self.table.objects.bulk_update(objs, ["last_used"], batch_size=_CHUNK)

    def close_thread(self) -> None:
        try:
            connections.close_all()
        except Exception:  # noqa: BLE001
            pass


def _rows(queryset) -> Iterable[Row]:
    fields = (
        "key",
        "parent",
        "model_fingerprint",
        "token_count",
        "token_ids",
        "file",
        "bytes",
        "kv_bytes",
        "created",
        "last_used",
    )
    for *head, created, last_used in queryset.order_by().values_list(*fields):
        yield Row(*head, created.timestamp(), last_used.timestamp())


def _chunks(items: List[str]):
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]
