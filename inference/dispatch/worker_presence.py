"""Which worker processes are running, in Redis mode: each worker process keeps a key
``omlx:worker:<host>:<pid>`` alive (a heartbeat renews its expiry), so the server can answer 503 at
once when no worker runs instead of leaving requests in the queue. Keys expire by Redis's clock,
so the clocks of the machines do not matter."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Optional

logger = logging.getLogger("omlx.workers")

KEY_PREFIX = "omlx:worker:"

_started = False
_stopped = threading.Event()
_lock = threading.Lock()
_cache = {"at": 0.0, "alive": False}


def _client():
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.OMLX_REDIS_URL, socket_timeout=5)


def worker_id() -> str:
    """This process, as workers are named: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def is_alive(worker: str) -> Optional[bool]:
    """Whether the worker ``worker`` (a ``worker_id``) still beats; None when Redis cannot be asked."""
    try:
        return bool(_client().exists(KEY_PREFIX + worker))
    except Exception as exc:
        logger.warning("cannot ask Redis for worker %s: %s", worker, exc)
        return None


_run_client = None


def redis_run_id() -> Optional[str]:
    """The run id of the Redis (a new one each time it starts), None when it cannot be asked."""
    global _run_client
    try:
        if _run_client is None:
            _run_client = _client()  # one connection pool for every request of this process
        return _run_client.info("server").get("run_id")
    except Exception as exc:
        logger.warning("cannot ask Redis for its run id: %s", exc)
        return None


def start_heartbeat() -> None:
    """Announce this process as a worker until it exits (idempotent; Redis mode only)."""
    global _started
    from django.conf import settings

    if not settings.OMLX_REDIS_URL:
        return
    with _lock:
        if _started:
            return
        _started = True
    ttl = max(1, int(round(settings.OMLX_WORKER_HEARTBEAT_SECONDS)))
    key = KEY_PREFIX + worker_id()

    def announce(client):
        try:
            client.set(key, str(time.time()), ex=ttl)
        except Exception as exc:  # Redis away for a moment: try again
            logger.warning("worker heartbeat failed: %s", exc)

    def beat():
        client = _client()
        while not _stopped.wait(ttl / 3):
            announce(client)

    # The first beat before this returns: a worker that says it takes requests is seen by the
    # servers from then on (a thread's first beat could come after the first request's check).
    announce(_client())
    threading.Thread(target=beat, name="omlx-heartbeat", daemon=True).start()


def stop_heartbeat() -> None:
    """Withdraw this process's key (at a clean exit), so no request is sent its way."""
    from django.conf import settings

    if not settings.OMLX_REDIS_URL or not _started:
        return
    _stopped.set()
    try:
        _client().delete(KEY_PREFIX + worker_id())
    except Exception:
        pass


def live_workers(client) -> list:
    """The ids of the workers whose key exists now (raises when Redis cannot be asked)."""
    out = []
    for name in client.scan_iter(match=KEY_PREFIX + "*", count=1000):
        text = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        out.append(text[len(KEY_PREFIX) :])
    return out


def any_worker_alive(max_age: float = 1.0) -> Optional[bool]:
    """True if some worker process's key exists (the answer is reused for ``max_age`` seconds);
    None when Redis cannot be asked."""
    now = time.monotonic()
    if now - _cache["at"] < max_age:
        return _cache["alive"]
    try:
        client = _client()
        alive = next(iter(client.scan_iter(match=KEY_PREFIX + "*", count=1000)), None) is not None
    except Exception as exc:
        logger.warning("cannot ask Redis for workers: %s", exc)
        return None
    _cache.update(at=now, alive=alive)
    return alive
