"""What each worker tells the servers about itself, in Redis mode: a ``WorkerSummary`` under
``omlx:summary:<worker id>`` (expiring with the heartbeat), JSON signed with OMLX_REDIS_SECRET for
purpose "summary" (inference/dispatch/signed_json.py).

It carries the route keys (inference/dispatch/route_keys.py) of the prompts the worker ran most
recently, which its block cache holds (hot, or on SSD once evicted from RAM), at most
``MAX_KEYS``, newest last; its load; its models, memory and cache counters (the console's status
page and /metrics show them per worker); the id of its SSD tier's folder, the same for workers
that share one (the router counts a prefix one of them stored as restorable by all); what a row
of its decode steps costs in prompt tokens, as its engines measured it.

Redis is hostile (docs/security.md): a value over ``MAX_BYTES`` is refused before it is read, then
one not signed with the secret, then one whose fields are not of their kind and size, or that
names another worker than its key (a summary copied to pose as another worker). A refused summary
counts as none: the worker is routed to as if it held nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from .signed_json import ForgedMessage, SignedJson

logger = logging.getLogger("omlx.workers")

KEY_PREFIX = "omlx:summary:"
MAX_KEYS = 8192
MAX_MODELS = 256
MAX_BYTES = 256 * 1024
MAX_ROW_TOKENS = 1000.0  # a decode row dearer than this many prompt tokens is no measurement
_KEY = re.compile(r"[0-9a-f]{16}\Z")
_COUNTS = ("running", "waiting", "lookup_tokens", "hot_hit_tokens", "cold_hit_tokens", "jobs_taken")


@dataclass
class WorkerSummary:
    """One worker's state, as published. ``keys``: route keys held, oldest first."""

    worker: str
    keys: List[str] = field(default_factory=list)
    models: List[str] = field(default_factory=list)  # loaded models
    running: int = 0  # requests prefilling or decoding in its engines
    waiting: int = 0  # requests queued in its engines
    lookup_tokens: int = 0  # prompt tokens looked up in its prefix cache, since it started
    hot_hit_tokens: int = 0  # of those, served from RAM
    cold_hit_tokens: int = 0  # of those, served from SSD
    jobs_taken: int = 0  # requests it took from its queue (routed or not)
    memory_bytes: Optional[int] = None  # resident memory of the process
    model_memory_bytes: Optional[int] = None  # memory of its loaded models
    cold_tier: str = ""  # the id of its SSD tier's folder (inference/dispatch/cold_tier_id.py)
    # What one row of a decode step costs there, in prompt tokens, as its engines measured it
    # (EngineStats.decode_row_tokens); 0: not measured yet (the router then uses its setting).
    decode_row_tokens: float = 0.0

    @property
    def load(self) -> int:
        return self.running + self.waiting

    @property
    def hit_ratio(self) -> Optional[float]:
        if not self.lookup_tokens:
            return None
        return (self.hot_hit_tokens + self.cold_hit_tokens) / self.lookup_tokens


def _signer(secret: str) -> SignedJson:
    return SignedJson(secret, "summary")


def encode(summary: WorkerSummary, secret: str) -> bytes:
    return _signer(secret).dumps(asdict(summary))


def decode(worker: str, data: bytes, secret: str) -> WorkerSummary:
    """The summary stored under worker ``worker``'s key; ForgedMessage when it is refused."""
    if data is None or len(data) > MAX_BYTES:
        raise ForgedMessage(f"summary over {MAX_BYTES} bytes")
    value = _signer(secret).loads(data)
    if not isinstance(value, dict) or value.get("worker") != worker:
        raise ForgedMessage("summary of another worker")
    keys, models = value.get("keys"), value.get("models")
    if not isinstance(keys, list) or len(keys) > MAX_KEYS:
        raise ForgedMessage("bad keys")
    if not all(isinstance(k, str) and _KEY.match(k) for k in keys):
        raise ForgedMessage("bad keys")
    if not isinstance(models, list) or len(models) > MAX_MODELS:
        raise ForgedMessage("bad models")
    if not all(isinstance(m, str) and len(m) <= 512 for m in models):
        raise ForgedMessage("bad models")
    counts = {}
    for name in _COUNTS:
        number = value.get(name)
        if type(number) is not int or number < 0:
            raise ForgedMessage(f"bad {name}")
        counts[name] = number
    memory = {}
    for name in ("memory_bytes", "model_memory_bytes"):
        number = value.get(name)
        if number is not None and (type(number) is not int or number < 0):
            raise ForgedMessage(f"bad {name}")
        memory[name] = number
    tier = value.get("cold_tier", "")  # absent from an older worker's summary
    if not isinstance(tier, str) or not (tier == "" or _KEY.match(tier)):
        raise ForgedMessage("bad cold_tier")
    row = value.get("decode_row_tokens", 0.0)  # absent from an older worker's summary
    if type(row) not in (int, float) or not 0 <= row <= MAX_ROW_TOKENS:  # NaN fails too
        raise ForgedMessage("bad decode_row_tokens")
    return WorkerSummary(
        worker=worker,
        keys=keys,
        models=models,
        **counts,
        **memory,
        cold_tier=tier,
        decode_row_tokens=float(row),
    )


def read_all(client, secret: str) -> Tuple[Dict[str, WorkerSummary], int]:
    """Every worker's summary in Redis, and how many were refused (logged)."""
    names = [name for name in client.scan_iter(match=KEY_PREFIX + "*", count=1000)]
    if not names:
        return {}, 0
    # STRLEN first: a huge value is never transferred.
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.strlen(name)
        sizes = pipe.execute()
    wanted = [n for n, size in zip(names, sizes) if size <= MAX_BYTES]
    refused = len(names) - len(wanted)
    values = client.mget(wanted) if wanted else []
    out: Dict[str, WorkerSummary] = {}
    for name, data in zip(wanted, values):
        worker = (name.decode("utf-8", "replace") if isinstance(name, bytes) else name)[len(KEY_PREFIX) :]
        if data is None:
            continue  # expired between the two reads
        try:
            out[worker] = decode(worker, data, secret)
        except ForgedMessage as exc:
            refused += 1
            logger.warning("refused the summary of worker %s in Redis (%s)", worker, exc)
    if refused and len(names) != len(wanted):
        logger.warning("refused %d summaries in Redis over %d bytes", len(names) - len(wanted), MAX_BYTES)
    return out, refused
