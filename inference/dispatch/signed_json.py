"""Messages that cross Redis: JSON signed with an HMAC-SHA256 of the shared secret
(OMLX_REDIS_SECRET), so that nothing read from Redis can run code (no pickle) and a message that was
not written by a process holding the secret is recognised and dropped.

Wire format: ``omlx1:<purpose>:<hex HMAC>:<JSON>``. The HMAC covers the purpose and the JSON, so a
message signed for one use (a Huey job, a channel-layer event) is not accepted as the other.

JSON has no tuples, datetimes or Huey's namedtuples: they travel as one-key objects tagged with a
"$" name (``{"$tuple": [...]}``); a dict of ours whose only key starts with "$" is itself wrapped
(``{"$dict": [[key, value], ...]}``), so no data can pose as a tag. Anything else is a TypeError
when sending, never a surprise when receiving.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
from typing import Any, Callable, Dict

PREFIX = b"omlx1:"


class ForgedMessage(ValueError):
    """A message read from Redis that this secret did not sign (forged, altered, or from a
    process configured with another secret), or that is not well-formed."""


def _encode_datetime(value: datetime.datetime) -> str:
    return value.isoformat()


def _namedtuples() -> Dict[str, type]:
    from huey.registry import Message
    from huey.utils import Error

    return {"$message": Message, "$error": Error}


class SignedJson:
    """Signs and checks messages of one ``purpose`` with ``secret``."""

    def __init__(self, secret: str, purpose: str):
        if not secret:
            raise ValueError("the Redis secret is empty")
        self._key = secret.encode("utf-8")
        self._purpose = purpose.encode("ascii")
        self._tagged = _namedtuples()

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, self._purpose + b"\0" + body, hashlib.sha256).hexdigest().encode()

    def dumps(self, value: Any) -> bytes:
        body = json.dumps(self._encode(value), separators=(",", ":"), allow_nan=False).encode("utf-8")
        return b"".join((PREFIX, self._purpose, b":", self._mac(body), b":", body))

    def loads(self, data: bytes) -> Any:
        if isinstance(data, str):
            data = data.encode("utf-8")
        head = PREFIX + self._purpose + b":"
        if not isinstance(data, bytes) or not data.startswith(head):
            raise ForgedMessage("not a signed omlx message")
        mac, sep, body = data[len(head) :].partition(b":")
        if not sep or not hmac.compare_digest(mac, self._mac(body)):
            raise ForgedMessage("bad signature")
        try:
            return self._decode(json.loads(body))
        except (ValueError, TypeError, KeyError) as exc:  # signed but not ours to read: a bug
            raise ForgedMessage(f"unreadable signed message: {exc}") from None

    # -- tagged JSON --

    def _encode(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        for tag, kind in self._tagged.items():
            if type(value) is kind:
                return {tag: [self._encode(v) for v in value]}
        if isinstance(value, (list, tuple)):
            items = [self._encode(v) for v in value]
            return items if isinstance(value, list) else {"$tuple": items}
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise TypeError("only string keys can be sent through Redis")
            items = {k: self._encode(v) for k, v in value.items()}
            if len(items) == 1 and next(iter(items)).startswith("$"):
                return {"$dict": [[k, v] for k, v in items.items()]}
            return items
        if isinstance(value, datetime.datetime):
            return {"$datetime": _encode_datetime(value)}
        if isinstance(value, datetime.timedelta):
            return {"$timedelta": value.total_seconds()}
        raise TypeError(f"{type(value).__name__} cannot be sent through Redis")

    def _decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            tag, inner = next(iter(value.items()))
            if tag.startswith("$"):
                return self._decoders()[tag](inner)
        return {k: self._decode(v) for k, v in value.items()}

    def _decoders(self) -> Dict[str, Callable[[Any], Any]]:
        decoders = {
            "$tuple": lambda v: tuple(self._decode(x) for x in v),
            "$dict": lambda v: {k: self._decode(x) for k, x in v},
            "$datetime": datetime.datetime.fromisoformat,
            "$timedelta": lambda v: datetime.timedelta(seconds=v),
        }
        for tag, kind in self._tagged.items():
            decoders[tag] = lambda v, kind=kind: kind(*[self._decode(x) for x in v])
        return decoders
