"""A streaming response whose event generator is closed as soon as the client goes away.

Django closes the iterator it consumes (``aiter(response)``) when a client disconnects, but not the
generator behind it: that one is finalized only when it is garbage-collected, which can take long
when a reference cycle holds it. Our generators abort their request in ``finally``, so the KV would
stay busy meanwhile. This response closes the generator itself when its own iteration ends.
"""

from __future__ import annotations

from contextlib import aclosing

from django.http import StreamingHttpResponse


class EventStreamResponse(StreamingHttpResponse):
    """``text/event-stream`` over an async generator of ``str`` events, closed with the response."""

    def __init__(self, events, **kwargs):
        kwargs.setdefault("content_type", "text/event-stream")
        super().__init__(events, **kwargs)
        self._events = events
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"  # proxies must pass events on at once

    async def __aiter__(self):
        async with aclosing(self._events) as events:
            async for part in events:
                yield self.make_bytes(part)
