"""Generation events over the channel layer: one group per API request.

The worker side (``publish``) runs on whatever thread produces an event (the Huey worker, the
engine thread). The view side (``Subscription``) runs on the server's event loop. Channels'
in-memory layer keeps asyncio queues that only the loop reading them may touch, so with it an
event is handed to that loop (recorded per group on subscribe); any other layer (Redis) is
called directly.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Dict, Optional

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

MESSAGE_TYPE = "generation.event"

_loops: Dict[str, asyncio.AbstractEventLoop] = {}
_loops_lock = threading.Lock()


def group_name(request_id: str) -> str:
    return f"omlx.gen.{request_id}"


def publish(request_id: str, event: dict) -> None:
    """Send ``event`` (a JSON-able dict) to the group of ``request_id``; dropped when nobody
    listens (the client has gone)."""
    layer = get_channel_layer()
    group = group_name(request_id)
    message = {"type": MESSAGE_TYPE, "event": event}
    if isinstance(layer, InMemoryChannelLayer):
        with _loops_lock:
            loop = _loops.get(group)
        if loop is not None and not loop.is_closed():
            # run_coroutine_threadsafe keeps the order: each send completes without waiting.
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)
        return
    async_to_sync(layer.group_send)(group, message)


class Subscription:
    """``async with Subscription(request_id) as sub: event = await sub.receive(timeout)``.

    Join the group before the work is submitted, so that no event is missed.
    """

    def __init__(self, request_id: str):
        self.group = group_name(request_id)
        self.layer = get_channel_layer()
        self.channel: Optional[str] = None

    async def __aenter__(self) -> "Subscription":
        self.channel = await self.layer.new_channel()
        with _loops_lock:
            _loops[self.group] = asyncio.get_running_loop()
        await self.layer.group_add(self.group, self.channel)
        return self

    async def receive(self, timeout: Optional[float] = None) -> Optional[dict]:
        """The next event, or None after ``timeout`` seconds without one."""
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), timeout)
        except asyncio.TimeoutError:
            return None
        return message["event"]

    async def __aexit__(self, *exc) -> None:
        with _loops_lock:
            _loops.pop(self.group, None)
        await self.layer.group_discard(self.group, self.channel)
        if isinstance(self.layer, InMemoryChannelLayer):
            self.layer.channels.pop(self.channel, None)  # its queue would linger otherwise
