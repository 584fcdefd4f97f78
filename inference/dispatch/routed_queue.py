"""The queues of routed jobs, in Redis mode: one Redis list per worker, ``omlx:jobs:<worker id>``,
and ``omlx:jobs:any`` that every worker takes from after its own. Each entry is a
``GenerationJob.to_dict()`` JSON signed with OMLX_REDIS_SECRET for purpose "job"; an entry that is
not (pushed by anyone else who can reach the Redis) is logged and dropped, never run.

A worker that dies leaves its list behind: every live worker, at each heartbeat, moves the jobs of
lists whose worker has no presence key any more (inference/dispatch/worker_presence.py) to
``omlx:jobs:any`` one by one (LMOVE: a job is never in two lists), where the next free worker takes
it. A request sent to a worker that died before taking it is thus served, a heartbeat late.
"""

from __future__ import annotations

import logging
from typing import List, Optional

from .signed_json import ForgedMessage, SignedJson

logger = logging.getLogger("omlx.workers")

PREFIX = "omlx:jobs:"
ANY = PREFIX + "any"


def queue_name(worker: str) -> str:
    return PREFIX + worker


def _signer(secret: str) -> SignedJson:
    return SignedJson(secret, "job")


def push(client, secret: str, worker: Optional[str], job: dict) -> None:
    """Queue ``job`` for ``worker`` (None: the first free worker)."""
    client.rpush(queue_name(worker) if worker else ANY, _signer(secret).dumps(job))


def take(client, secret: str, worker: str, timeout: float = 1.0) -> Optional[dict]:
    """The next job for ``worker`` (its own list first), or None after ``timeout`` seconds, or when
    the entry was refused."""
    item = client.blpop([queue_name(worker), ANY], timeout=timeout)
    if item is None:
        return None
    try:
        job = _signer(secret).loads(item[1])
    except ForgedMessage as exc:
        logger.warning("dropped a job from %s that is not signed with this secret (%s)", item[0], exc)
        return None
    if not isinstance(job, dict):
        logger.warning("dropped a job from %s that is not an object", item[0])
        return None
    return job


def rescue_orphans(client, alive_key) -> int:
    """Move the jobs of dead workers' lists to ``omlx:jobs:any``; how many moved. ``alive_key``:
    a worker id -> its presence key."""
    moved = 0
    names: List[bytes] = list(client.scan_iter(match=PREFIX + "*", count=1000))
    for name in names:
        text = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        if text == ANY:
            continue
        worker = text[len(PREFIX) :]
        if client.exists(alive_key(worker)):
            continue
        while client.lmove(name, ANY, "LEFT", "RIGHT") is not None:
            moved += 1
    if moved:
        logger.warning("moved %d jobs of workers that stopped to %s", moved, ANY)
    return moved
