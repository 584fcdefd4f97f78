"""The Channels layer over Redis pub/sub, with every message JSON signed with OMLX_REDIS_SECRET
(``inference.dispatch.signed_json``) instead of msgpack: a message published by anyone else who can
reach the Redis (a forged token, a forged abort) is logged and dropped, and the reader waits for
the next one."""

from __future__ import annotations

import logging

from channels_redis.pubsub import RedisPubSubChannelLayer, _async_proxy

from .signed_json import ForgedMessage, SignedJson

logger = logging.getLogger("omlx.relay")


class _Serializer:
    def __init__(self, secret: str):
        self._signed = SignedJson(secret, "channels")

    def serialize(self, message) -> bytes:
        return self._signed.dumps(message)

    def deserialize(self, message):
        return self._signed.loads(message)


class SignedRedisChannelLayer(RedisPubSubChannelLayer):
    """settings.CHANNEL_LAYERS "BACKEND" in Redis mode (CONFIG ``redis_secret``: the shared secret)."""

    def __init__(self, *args, redis_secret: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self._serializer = _Serializer(redis_secret)

    async def receive(self, channel):
        while True:
            try:
                return await _async_proxy(self, "receive", channel)
            except ForgedMessage as exc:
                logger.warning(
                    "dropped a message on %s that is not signed with this secret (%s)", channel, exc
                )
