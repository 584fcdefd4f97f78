from django.apps import AppConfig
from django.db.backends.signals import connection_created


def _sqlite_wal(sender, connection, **kwargs):
    """SQLite in WAL mode: the cold tier's writer thread, the engine and the Huey worker read and
    write rows concurrently without blocking readers. NORMAL sync is durable across process
    crashes (rows are a mirror of the block files; start-up reconciliation repairs the rest)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")


class CacheConfig(AppConfig):
    """The KV block cache: prefix index, hot and cold tiers. Imports neither other app."""

    name = "cache"
    label = "omlx_cache"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import cold_index
        from .orm_index import OrmColdIndex

        # The cold tier's rows live in this app's CacheBlock table (cache/cold_index.py).
        cold_index.install(OrmColdIndex())
        # cache/tasks.py (the periodic cold-tier GC) is imported by the Huey consumer's discovery
        # of tasks modules.
        connection_created.connect(_sqlite_wal, dispatch_uid="omlx_cache_sqlite_wal")
