"""Database models of the cache app.

Rows describe cold-tier block files; tensors never go into the database. The files are the truth
(each file's header carries its full metadata), the rows a queryable mirror kept for the admin
console, for last-used times across restarts, and for GC. Reconciliation at start repairs any
difference between them.
"""

from django.db import models


class CacheBlock(models.Model):
    """One KV block file of the cold tier.

    Invariant after reconciliation: a row exists iff its file exists under the cold-cache root at
    ``file``. Writers create the file before the row; removers delete the file before the row, so
    a crash between the two steps leaves either a file without a row (re-indexed at start) or a
    row without a file (dropped at start and by GC).
    """

    TIER_COLD = "cold"

    key = models.CharField(max_length=64, primary_key=True)  # block key, hex
    parent = models.CharField(max_length=64)  # parent block key, hex (the root key for a first block)
    model_fingerprint = models.CharField(max_length=64, db_index=True)  # ModelFingerprint.hex
    token_count = models.PositiveIntegerField()
    # The token ids, base64 of little-endian uint32 as in the file's header: with them a restart
    # rebuilds the index from rows alone, without opening thousands of files.
    token_ids = models.TextField()
    kv_bytes = models.BigIntegerField()  # the tensors' size (what the block takes in RAM)
    tier = models.CharField(max_length=8, default=TIER_COLD)
    file = models.CharField(max_length=255)  # relative to the cold-cache root
    bytes = models.BigIntegerField()  # file size on disk
    created = models.DateTimeField()
    last_used = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["last_used"]

    def __str__(self) -> str:
        return f"{self.tier} block {self.key[:16]} ({self.token_count} tokens, {self.bytes} bytes)"


class GCRun(models.Model):
    """One pass of the cold-tier GC (cache/gc.py), periodic or started by hand from the admin
    console. Only the newest ``KEEP`` rows are kept (cache/tasks.py trims older ones)."""

    TRIGGERS = [("periodic", "periodic"), ("manual", "manual")]
    KEEP = 500

    started = models.DateTimeField(db_index=True)
    seconds = models.FloatField()
    files = models.BigIntegerField()  # block files left
    bytes = models.BigIntegerField()  # their size
    expired = models.PositiveIntegerField()  # removed by the TTL
    evicted = models.PositiveIntegerField()  # removed by the size cap
    removed_bytes = models.BigIntegerField()
    stale_rows = models.PositiveIntegerField()  # CacheBlock rows without a file, dropped
    trigger = models.CharField(max_length=16, choices=TRIGGERS, default="periodic")

    class Meta:
        ordering = ["-started"]

    def __str__(self) -> str:
        return (
            f"GC {self.trigger} at {self.started:%Y-%m-%d %H:%M:%S}: removed "
            f"{self.expired + self.evicted} blocks, {self.files} left"
        )
