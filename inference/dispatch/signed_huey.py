"""Huey over Redis without pickle: every job, schedule entry, result and revocation is JSON signed
with OMLX_REDIS_SECRET (``inference.dispatch.signed_json``). A job that does not carry a valid
signature (pushed into the queue by anyone else who can reach the Redis) is logged and dropped:
it never runs, and the worker goes on with the next one."""

from __future__ import annotations

import logging

from huey import RedisHuey
from huey.constants import EmptyData
from huey.serializer import Serializer

from .signed_json import ForgedMessage, SignedJson

logger = logging.getLogger("omlx.huey")


class SignedSerializer(Serializer):
    """Huey's serializer interface over ``SignedJson`` (no compression: jobs are small)."""

    def __init__(self, secret: str):
        super().__init__()
        self._signed = SignedJson(secret, "huey")

    def _serialize(self, data) -> bytes:
        return self._signed.dumps(data)

    def _deserialize(self, data):
        return self._signed.loads(data)


class SignedRedisHuey(RedisHuey):
    """settings.HUEY "huey_class" in Redis mode (``redis_secret``: the shared secret)."""

    def __init__(self, name="omlx", redis_secret: str = "", **kwargs):
        super().__init__(name, serializer=SignedSerializer(redis_secret), **kwargs)

    def dequeue(self):
        data = self.storage.dequeue()
        if data is None:
            return None
        try:
            return self.deserialize_task(data)
        except ForgedMessage as exc:
            logger.warning("dropped a job from the Redis queue that is not signed with this secret (%s)", exc)
            return None

    def _check_revoked(self, data, timestamp=None, peek=True):
        # A revocation that is not ours is ignored (Huey's own method would raise into execute).
        try:
            return super()._check_revoked(data, timestamp, peek)
        except ForgedMessage as exc:
            logger.warning("ignored a revocation in Redis that is not signed with this secret (%s)", exc)
            return super()._check_revoked(EmptyData, timestamp, peek)
