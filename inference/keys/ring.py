"""The keys this process accepts: a snapshot of the ``ApiKey`` rows, reloaded when a key was
created or revoked.

Every change (``store.create`` / ``store.revoke``, from the server or from `omlx keys` in another
process) replaces the stamp file $OMLX_HOME/keys.stamp; a check stats it (microseconds, no
database query on the request path) and reloads the rows when its identity changed. The stamp is
taken before the rows are read, so a change made during a reload is seen at the next check. No
stamp: no key was ever made with this OMLX_HOME, and nothing is read (``omlx serve`` writes the
stamp at start if rows exist without one: ``ensure_stamp``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Optional, Tuple

from asgiref.sync import sync_to_async
from django.conf import settings

logger = logging.getLogger("omlx.keys")

PREFIX = "omlx-"
LAST_USED_EVERY_SECONDS = 60.0  # ``last_used`` is written at most this often per key
_NO_DIGEST = "0" * 64  # compared against when the secret names no key (same work either way)


@dataclass(frozen=True)
class KeyInfo:
    """One created key as the request handlers see it (``request.omlx_key``)."""

    id: str
    name: str
    scopes: FrozenSet[str]
    shares_cache: bool
    digest: str = field(repr=False)

    @property
    def labels(self) -> Tuple[str, str]:
        return (self.id, self.name)


def digest(secret: str) -> str:
    """sha256 of the secret: the secret is 256 random bits, so no slow hash is needed."""
    return hashlib.sha256(secret.encode()).hexdigest()


def key_id_of(secret: str) -> Optional[str]:
    """``omlx-<key_id>-<random>`` -> key_id."""
    if not secret.startswith(PREFIX):
        return None
    key_id, sep, _ = secret[len(PREFIX) :].partition("-")
    return key_id if sep and key_id else None


def stamp_path() -> Path:
    return Path(settings.OMLX_HOME) / "keys.stamp"


def touch_stamp() -> None:
    """Tell every process that the keys changed (a new file: a new inode, whatever the clock)."""
    path = stamp_path()
    temp = path.with_name(f".keys.stamp.{os.getpid()}.{threading.get_ident()}")
    temp.write_text(f"{time.time_ns()}\n")
    os.replace(temp, path)


def ensure_stamp() -> None:
    """At start: rows without a stamp (a stamp removed by hand) get one, so they are read."""
    from inference.models import ApiKey

    if not stamp_path().exists() and ApiKey.objects.exists():
        touch_stamp()


class KeyRing:
    """``key_id -> KeyInfo`` of the rows at the last reload; ``signature`` is the stamp file's
    (inode, size, mtime) then (None until the first reload)."""

    def __init__(self):
        self._keys: Dict[str, KeyInfo] = {}
        self._signature = None
        self._loaded = False
        self._lock = threading.Lock()
        self._used_at: Dict[str, float] = {}  # key_id -> monotonic time of the last write

    def _stamp(self):
        try:
            st = os.stat(stamp_path())
        except FileNotFoundError:
            return "missing"
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def stale(self) -> bool:
        return not self._loaded or self._stamp() != self._signature

    def reload(self) -> None:
        from inference.models import ApiKey

        with self._lock:
            signature = self._stamp()
            rows = [] if signature == "missing" else list(ApiKey.objects.all())
            self._keys = {
                row.key_id: KeyInfo(row.key_id, row.name, frozenset(row.scopes), row.shares_cache, row.digest)
                for row in rows
            }
            self._signature = signature
            self._loaded = True

    def refresh(self) -> None:
        if self.stale():
            self.reload()

    async def arefresh(self) -> None:
        if self.stale():
            await sync_to_async(self.reload, thread_sensitive=False)()

    def __bool__(self) -> bool:
        return bool(self._keys)

    def get(self, key_id: Optional[str]) -> Optional[KeyInfo]:
        return self._keys.get(key_id) if key_id else None

    def match(self, secret: str) -> Optional[KeyInfo]:
        """The key whose secret this is, or None; the digests are compared in constant time."""
        info = self.get(key_id_of(secret))
        ok = hmac.compare_digest(digest(secret), info.digest if info else _NO_DIGEST)
        return info if ok and info is not None else None

    def note_use(self, info: KeyInfo) -> None:
        """Record ``last_used`` in the row, at most once a minute per key, off the request path."""
        now = time.monotonic()
        last = self._used_at.get(info.id)
        if last is not None and now - last < LAST_USED_EVERY_SECONDS:
            return
        self._used_at[info.id] = now
        threading.Thread(target=_write_last_used, args=(info.id,), daemon=True).start()


def _write_last_used(key_id: str) -> None:
    from django.db import connection
    from django.utils import timezone

    from inference.models import ApiKey

    try:
        ApiKey.objects.filter(key_id=key_id).update(last_used=timezone.now())
    except Exception:  # a busy database: the next use writes it
        logger.warning("could not record the last use of key %s", key_id, exc_info=True)
    finally:
        connection.close()


_ring = KeyRing()


def get_ring() -> KeyRing:
    return _ring
