"""The queues of routed jobs, in Redis mode: one Redis list per worker, ``omlx:jobs:<worker id>``,
and ``omlx:jobs:any`` for a job the server could not route (no worker had published a summary
yet), which any worker takes. Each entry is a ``GenerationJob.to_dict()`` JSON signed with
OMLX_REDIS_SECRET for purpose "job"; an entry that is not (pushed by anyone else who can reach the
Redis) is logged and dropped, never run. It carries the time it was queued by Redis's clock
(``TIME``, the one clock every process of the Redis shares): one older than ``JOB_EXPIRES_SECONDS``
when taken (its client has gone; or a recorded job replayed) is dropped too.

Taking is two steps, so that no job is lost with a worker that hangs: BLMOVE from the worker's list
to its ``omlx:taking:<worker id>`` list, then LREM from there; only the taker whose LREM removed the
entry runs it. A worker that dies or hangs leaves both lists behind: every live worker, at each
heartbeat, moves the entries of lists whose worker has no presence key any more
(inference/dispatch/worker_presence.py) to its own list, one by one (LMOVE: an entry is never in
two lists). A request sent to a worker that stopped before taking it is thus served, a heartbeat
late; a hung worker that wakes up finds its entries gone and runs none of them twice.
"""

from __future__ import annotations

import logging
from typing import Optional

from .signed_json import ForgedMessage, SignedJson

logger = logging.getLogger("omlx.workers")

PREFIX = "omlx:jobs:"
TAKING = "omlx:taking:"
ANY = PREFIX + "any"
JOB_EXPIRES_SECONDS = 300  # as the Huey jobs of inference/dispatch/huey.py


def queue_name(worker: str) -> str:
    return PREFIX + worker


def _signer(secret: str) -> SignedJson:
    return SignedJson(secret, "job")


def push(client, secret: str, worker: Optional[str], job: dict) -> None:
    """Queue ``job`` for ``worker`` (None: the first worker free)."""
    entry = {"job": job, "at": _redis_now(client)}
    client.rpush(queue_name(worker) if worker else ANY, _signer(secret).dumps(entry))


def _redis_now(client) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def take(client, secret: str, worker: str, timeout: float = 1.0) -> Optional[dict]:
    """The next job for ``worker`` (``omlx:jobs:any`` first, then its own list, waiting up to
    ``timeout`` seconds), or None: nothing came, another worker rescued it meanwhile, or it was
    refused."""
    taking = TAKING + worker
    item = client.lmove(ANY, taking, "LEFT", "RIGHT")
    if item is None:
        item = client.blmove(queue_name(worker), taking, timeout, "LEFT", "RIGHT")
    if item is None or client.lrem(taking, 1, item) != 1:
        return None
    try:
        entry = _signer(secret).loads(item)
    except ForgedMessage as exc:
        logger.warning("dropped a job from the Redis queue that is not signed with this secret (%s)", exc)
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("job"), dict):
        logger.warning("dropped a job from the Redis queue that is not an object")
        return None
    at = entry.get("at")
    if not isinstance(at, (int, float)) or _redis_now(client) - at > JOB_EXPIRES_SECONDS:
        logger.warning("dropped a job from the Redis queue queued over %ds ago", JOB_EXPIRES_SECONDS)
        return None
    return entry["job"]


def rescue_orphans(client, worker: str, alive_key) -> int:
    """Move the entries of dead workers' lists to ``worker``'s own; how many moved. ``alive_key``:
    a worker id -> its presence key."""
    moved = 0
    target = queue_name(worker)
    for prefix in (PREFIX, TAKING):
        for name in list(client.scan_iter(match=prefix + "*", count=1000)):
            text = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
            owner = text[len(prefix) :]
            if text == ANY or owner == worker or client.exists(alive_key(owner)):
                continue
            while client.lmove(name, target, "LEFT", "RIGHT") is not None:
                moved += 1
    if moved:
        logger.warning("took over %d jobs of workers that stopped", moved)
    return moved
