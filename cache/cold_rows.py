"""The cold tier's rows in SQLite (CacheBlock): Django set-up for plain scripts, and the batched
row operations that reconciliation, the writer thread and GC use.

Rows mirror the block files (the files are the truth), so every operation here may fail without
losing a block: callers log, count and carry on, and the next reconciliation repairs the rows.
Times cross this module as POSIX seconds (floats); rows hold aware UTC datetimes.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, Iterable, List, Optional, Tuple

from . import block_file
from .block_pool import KVBlock

logger = logging.getLogger("omlx.cache.cold")

_CHUNK = 500  # rows per statement (SQLite limits the number of bound variables)
_ready_lock = threading.Lock()
_migrated = False


@dataclass(frozen=True)
class Row:
    key: str
    parent: str
    fingerprint: str
    token_count: int
    token_ids: str  # base64 of little-endian uint32 (block_file.encode_tokens)
    file: str
    bytes: int
    kv_bytes: int
    created: float
    last_used: float

    @classmethod
    def of(cls, block: KVBlock, fingerprint: str, file_bytes: int, t: float) -> "Row":
        key = block.key.hex()
        return cls(key, block.parent.hex(), fingerprint, block.num_tokens,
                   block_file.encode_tokens(block.token_ids), block_file.relative_path(fingerprint, key),
                   file_bytes, block.nbytes, t, t)

    def block(self) -> Optional[KVBlock]:
        """The index entry this row describes (layers None), or None if the row is unusable
        (e.g. made before migration 0002, without token ids)."""
        try:
            tokens = block_file.decode_tokens(self.token_ids)
            key, parent = bytes.fromhex(self.key), bytes.fromhex(self.parent)
        except ValueError:
            return None
        if not tokens or len(tokens) != self.token_count or self.kv_bytes <= 0:
            return None
        return KVBlock(key, parent, tokens, None, self.kv_bytes)


def ensure_django() -> bool:
    """Make the ORM usable in this process; False (after a warning) if the database is not.

    In the server and under pytest-django, Django is already set up and this only checks. In a
    plain script it runs django.setup() (DJANGO_SETTINGS_MODULE defaults to omlx_site.settings)
    and applies unapplied migrations to the database in use, once per process.
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
                from django.db import connection
                from django.db.migrations.executor import MigrationExecutor

                executor = MigrationExecutor(connection)
                if executor.migration_plan(executor.loader.graph.leaf_nodes()):
                    call_command("migrate", interactive=False, verbosity=0)
                _migrated = True
        return True
    except Exception as e:  # noqa: BLE001 - any failure means "no rows", never "no cache"
        logger.warning("cold tier: database unavailable (%s); block files are used without rows", e)
        return False


def close_thread_connections() -> None:
    """Close this thread's database connections (a worker thread calls it before it ends)."""
    try:
        from django.db import connections

        connections.close_all()
    except Exception:  # noqa: BLE001
        pass


def to_datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def rows_for(fingerprint: str) -> Dict[str, Row]:
    """Rows of one model, by key hex."""
    from .models import CacheBlock

    return {r.key: r for r in _rows(CacheBlock.objects.filter(model_fingerprint=fingerprint))}


def usage() -> Dict[str, Tuple[str, str, float]]:
    """key hex -> (parent hex, fingerprint hex, last used) for every row: what GC needs."""
    from .models import CacheBlock

    rows = CacheBlock.objects.order_by().values_list("key", "parent", "model_fingerprint", "last_used")
    return {key: (parent, fp, last_used.timestamp()) for key, parent, fp, last_used in rows}


def insert(rows: Iterable[Row]) -> None:
    """Insert rows; a key that already has a row keeps it."""
    from django.db import connection, transaction

    from .models import CacheBlock

    rows = list(rows)
    if connection.vendor != "sqlite":
        objs = [CacheBlock(key=r.key, parent=r.parent, model_fingerprint=r.fingerprint,
                           token_count=r.token_count, token_ids=r.token_ids, tier=CacheBlock.TIER_COLD,
                           file=r.file, bytes=r.bytes, kv_bytes=r.kv_bytes,
                           created=to_datetime(r.created), last_used=to_datetime(r.last_used))
                for r in rows]
        CacheBlock.objects.bulk_create(objs, batch_size=_CHUNK, ignore_conflicts=True)
        return
    # SQLite: one prepared statement for all rows, ~10x faster than bulk_create's per-field work
    # (re-indexing thousands of files after a lost database stays well under a second).
    columns = ("key", "parent", "model_fingerprint", "token_count", "token_ids", "tier", "file",
               "bytes", "kv_bytes", "created", "last_used")
    sql = (f'INSERT OR IGNORE INTO "{CacheBlock._meta.db_table}" ({", ".join(columns)}) '
           f'VALUES ({", ".join(["%s"] * len(columns))})')
    adapt = connection.ops.adapt_datetimefield_value
    params = [(r.key, r.parent, r.fingerprint, r.token_count, r.token_ids, CacheBlock.TIER_COLD, r.file,
               r.bytes, r.kv_bytes, adapt(to_datetime(r.created)), adapt(to_datetime(r.last_used)))
              for r in rows]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, params)


def delete(keys: Iterable[str]) -> None:
    from django.db import transaction

    from .models import CacheBlock

    keys = list(keys)
    with transaction.atomic():
        for chunk in _chunks(keys):
            CacheBlock.objects.filter(key__in=chunk).delete()


def touch(last_used: Dict[str, float]) -> None:
    """Persist last-used times in one transaction; keys without a row are skipped."""
    from django.db import transaction

    from .models import CacheBlock

    objs = [CacheBlock(key=k, last_used=to_datetime(t)) for k, t in last_used.items()]
    with transaction.atomic():
        CacheBlock.objects.bulk_update(objs, ["last_used"], batch_size=_CHUNK)


def _rows(queryset) -> Iterable[Row]:
    fields = ("key", "parent", "model_fingerprint", "token_count", "token_ids", "file", "bytes",
              "kv_bytes", "created", "last_used")
    for *head, created, last_used in queryset.order_by().values_list(*fields):
        yield Row(*head, created.timestamp(), last_used.timestamp())


def _chunks(items: List[str]):
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]
