"""What ``Engine.submit`` hands back: the events of one request, as an iterator for the thread
that submitted it."""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Iterator

from .request import RequestOutput

if TYPE_CHECKING:
    from .engine import Engine


class RequestStream:
    """The events of one request, consumed by the submitting thread (iterate it), or pushed
    to a callback given to ``Engine.submit``."""

    def __init__(self, engine: "Engine", request_id: str):
        self.engine = engine
        self.request_id = request_id
        self._events: "queue.SimpleQueue[RequestOutput]" = queue.SimpleQueue()
        self.finished = False

    def put(self, event: RequestOutput) -> None:
        self._events.put(event)

    def __iter__(self) -> Iterator[RequestOutput]:
        while not self.finished:
            event = self._events.get()
            self.finished = event.finished
            yield event

    def abort(self) -> None:
        self.engine.abort(self.request_id)
