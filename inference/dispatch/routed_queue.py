"""The queues of routed jobs, in Redis mode: one Redis list per worker, ``omlx:jobs:<worker id>``,
and ``omlx:jobs:any`` for a job the server could not route (no worker had published a summary
yet), which any worker takes. Each entry is a ``GenerationJob.to_dict()`` JSON signed with
OMLX_REDIS_SECRET for purpose "job"; an entry that is not (pushed by anyone else who can reach the
Redis) is logged and dropped, never run.

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


def queue_name(worker: str) -> str:
    return PREFIX + worker


def _signer(secret: str) -> SignedJson:
    return SignedJson(secret, "job")


def push(client, secret: str, worker: Optional[str], job: dict) -> None:
    """Queue ``job`` for ``worker`` (None: the first worker free)."""
    client.rpush(queue_name(worker) if worker else ANY, _signer(secret).dumps(job))


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
        job = _signer(secret).loads(item)
    except ForgedMessage as exc:
        logger.warning("dropped a job from the Redis queue that is not signed with this secret (%s)", exc)
        return None
    if not isinstance(job, dict):
        logger.warning("dropped a job from the Redis queue that is not an object")
        return None
    return job


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
