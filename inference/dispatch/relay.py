"""Generation events over the channel layer: one group per API request, plus one control group that
every worker process listens to (aborts).

The worker side (``publish``) runs on whatever thread produces an event (the Huey worker, the
engine thread). The view side (``Subscription``) runs on the server's event loop.

- Channels' in-memory layer (the embedded default) keeps asyncio queues that only the loop reading
  them may touch, so an event is handed to that loop (recorded per group on subscribe). The events
  of an API request skip the layer: they go straight to its ``Subscription``'s queue through the
  loop's ``_Mailbox``, which wakes the loop once for every event published meanwhile (one engine
  step's events for every stream), where ``group_send`` cost a task and a future per event.
- Any other layer (Redis) is driven by one ``_Sender`` per process: an event loop thread that sends
  events one after the other, in the order ``publish`` was called, so the tokens of a request keep
  their order and the engine thread never waits for the network. Each event carries the sending
  process's worker id (``"worker"``), so that a view can tell when the worker running its request
  is gone (``inference.dispatch.worker_presence``) instead of waiting forever, and its number in
  its group (``"seq"``, from 0), so that a view can tell when Redis lost some of them (it dropped
  the connection, or restarted) instead of streaming a reply with a hole in it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import OrderedDict
from typing import Callable, Dict, Optional

from channels.layers import InMemoryChannelLayer, get_channel_layer

from .errors import queue_unavailable

logger = logging.getLogger("omlx.relay")

MESSAGE_TYPE = "generation.event"
CONTROL_GROUP = "omlx.control"

_loops: Dict[str, asyncio.AbstractEventLoop] = {}
_loops_lock = threading.Lock()
_listeners: Dict[str, int] = {}  # groups of listen_on_loop -> how many listen
_subscriptions: Dict[str, "Subscription"] = {}  # in-memory layer: group -> the Subscription reading it


def group_name(request_id: str) -> str:
    return f"omlx.gen.{request_id}"


def publish(request_id: str, event: dict) -> None:
    """Send ``event`` (a JSON-able dict) to the group of ``request_id``; dropped when nobody
    listens (the client has gone)."""
    _send(group_name(request_id), event)


def publish_group(group: str, event: dict) -> None:
    """Send ``event`` to any group, as ``publish`` does (e.g. a benchmark's progress to the admin
    page's sockets). With the in-memory layer it arrives only while a listener in this process has
    called ``listen_on_loop(group, loop)``."""
    _send(group, event)


def listen_on_loop(group: str, loop: asyncio.AbstractEventLoop) -> None:
    """A consumer on ``loop`` joined ``group`` (in-memory layer: its events are handed to that
    loop). Counted: each call needs its ``stop_listening``."""
    with _loops_lock:
        _loops[group] = loop
        _listeners[group] = _listeners.get(group, 0) + 1


def stop_listening(group: str) -> None:
    with _loops_lock:
        left = _listeners.get(group, 0) - 1
        if left > 0:
            _listeners[group] = left
        else:
            _listeners.pop(group, None)
            _loops.pop(group, None)


def broadcast_control(event: dict) -> None:
    """Send ``event`` to every worker process listening (``listen_control``)."""
    _send(CONTROL_GROUP, event)


def _send(group: str, event: dict) -> None:
    layer = get_channel_layer()
    message = {"type": MESSAGE_TYPE, "event": event}
    if isinstance(layer, InMemoryChannelLayer):
        with _loops_lock:
            loop = _loops.get(group)
            subscription = _subscriptions.get(group)
        if subscription is not None:
            subscription._mailbox.put(subscription, event)
        elif loop is not None and not loop.is_closed():
            # run_coroutine_threadsafe keeps the order: each send completes without waiting.
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)
        return
    from inference.dispatch.worker_presence import worker_id

    message["event"] = dict(event, worker=worker_id(), seq=_next_seq(group))
    _sender().send(layer, group, message)


_seqs: "OrderedDict[str, int]" = OrderedDict()  # group -> the number of its next event (LRU)
_seqs_lock = threading.Lock()
MAX_SEQ_GROUPS = 100_000  # far more than the requests one process streams at once


def _next_seq(group: str) -> int:
    with _seqs_lock:
        seq = _seqs.pop(group, 0)
        _seqs[group] = seq + 1
        while len(_seqs) > MAX_SEQ_GROUPS:
            _seqs.popitem(last=False)
        return seq


class _Sender:
    """An event loop thread that sends messages to a shared channel layer in arrival order."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._queue: Optional[asyncio.Queue] = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="omlx-relay", daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self._queue = asyncio.Queue()
        self.loop.create_task(self._drain())
        ready.set()
        self.loop.run_forever()

    async def _drain(self) -> None:
        failing = False  # log the first failure of a streak with its traceback, then one line
        while True:
            layer, group, message = await self._queue.get()
            try:
                await layer.group_send(group, message)
                if failing:
                    logger.warning("channel layer reachable again")
                failing = False
            except Exception as exc:
                if not failing:
                    logger.exception(
                        "sending to %s failed; events are dropped until the channel layer answers again",
                        group,
                    )
                failing = True
                logger.debug("dropped an event for %s: %s", group, exc)
            finally:
                self._queue.task_done()

    def send(self, layer, group: str, message: dict) -> None:
        self.loop.call_soon_threadsafe(self._queue.put_nowait, (layer, group, message))

    def flush(self, timeout: float) -> bool:
        """Wait until everything sent so far has left; False after ``timeout`` seconds."""
        future = asyncio.run_coroutine_threadsafe(self._queue.join(), self.loop)
        try:
            future.result(timeout)
            return True
        except Exception:
            future.cancel()
            return False


_sender_instance: Optional[_Sender] = None
_sender_lock = threading.Lock()


def _sender() -> _Sender:
    global _sender_instance
    with _sender_lock:
        if _sender_instance is None:
            _sender_instance = _Sender()
        return _sender_instance


def flush(timeout: float = 5.0) -> bool:
    """Wait until the events published so far have left this process (shared layers only)."""
    with _sender_lock:
        sender = _sender_instance
    return sender.flush(timeout) if sender is not None else True


_control_started = False


def listen_control(handler: Callable[[dict], None]) -> bool:
    """Call ``handler(event)`` (on the sender's thread) for every ``broadcast_control`` event, from
    now on. Only for shared layers (other processes); returns False for the in-memory layer."""
    global _control_started
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        return False
    with _sender_lock:
        if _control_started:
            return True
        _control_started = True
    sender = _sender()

    async def listen():
        channel = await layer.new_channel()
        await layer.group_add(CONTROL_GROUP, channel)
        subscribed.set()
        while True:
            message = await layer.receive(channel)
            try:
                handler(message["event"])
            except Exception:
                logger.exception("control event %r failed", message.get("event"))

    subscribed = threading.Event()
    asyncio.run_coroutine_threadsafe(listen(), sender.loop)
    subscribed.wait(10)
    return True


class _Mailbox:
    """Events for the subscriptions of one loop, from any thread: the loop is woken when the first
    event arrives and delivers every event that came in the meantime, in arrival order."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = weakref.ref(loop)  # weak: the box is the value of a weak-keyed map of loops
        self._items: list = []
        self._lock = threading.Lock()

    def put(self, subscription: "Subscription", event: dict) -> None:
        with self._lock:
            wake = not self._items
            self._items.append((subscription, event))
        if wake:
            loop = self._loop()
            try:
                if loop is None:
                    raise RuntimeError("the loop is gone")
                loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody reads these events any more
                with self._lock:
                    self._items.clear()

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for subscription, event in items:
            if subscription._events is not None:
                subscription._events.put_nowait(event)


_mailboxes: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox]" = weakref.WeakKeyDictionary()


def _mailbox(loop: asyncio.AbstractEventLoop) -> _Mailbox:
    with _loops_lock:
        box = _mailboxes.get(loop)
        if box is None:
            box = _mailboxes[loop] = _Mailbox(loop)
        return box


class Subscription:
    """``async with Subscription(request_id) as sub: event = await sub.receive(timeout)``.

    Join the group before the work is submitted, so that no event is missed. A reader task moves
    messages from the layer to a local queue: a receive that times out cancels only the wait on that
    queue, never the layer's receive (Redis pub/sub drops a channel whose receive is cancelled).
    """

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.group = group_name(request_id)
        self.layer = get_channel_layer()
        self.channel: Optional[str] = None
        self._events: Optional[asyncio.Queue] = None
        self._reader: Optional[asyncio.Task] = None
        self._worker: Optional[str] = None  # the worker process that sent the last event (Redis)
        self._seq = 0  # the number of the next event expected (Redis)
        self._redis_run: Optional[str] = None  # Redis's run id when subscribed (a restart changes it)
        self._heard_at = 0.0  # loop time of the last event or liveness check
        self.observer: Optional[Callable[[dict], None]] = None  # sees every event (inference.metrics)
        self._mailbox: Optional[_Mailbox] = None

    async def __aenter__(self) -> "Subscription":
        loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()
        self._heard_at = loop.time()
        if isinstance(self.layer, InMemoryChannelLayer):  # events come through the mailbox
            self._mailbox = _mailbox(loop)
            with _loops_lock:
                _loops[self.group] = loop
                _subscriptions[self.group] = self
            return self
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
        except Exception as exc:  # Redis down: the layer forgot the failed subscription
            self.channel = None
            raise queue_unavailable(exc) from None
        with _loops_lock:
            _loops[self.group] = loop
        self._reader = asyncio.ensure_future(self._read())
        from . import worker_presence

        self._redis_run = await asyncio.to_thread(worker_presence.redis_run_id)
        return self

    async def _read(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            self._events.put_nowait(message["event"])

    async def receive(self, timeout: Optional[float] = None) -> Optional[dict]:
        """The next event, or None after ``timeout`` seconds without one.

        With a shared layer, a silence longer than a worker heartbeat makes it ask Redis whether
        the worker is still there: if the request's worker is gone, an "error" delta ends the
        request; if no worker at all is running before one took the request, None (as a timeout).
        When Redis cannot be asked, or restarted since the subscription (its jobs and events are
        gone), or an event's number shows that some were lost, the event that ends the request
        with a 503 (``_queue_lost_event``).
        """
        event = await self._receive(timeout)
        if event is not None and self.observer is not None:
            try:
                self.observer(event)
            except Exception:
                logger.exception("observing an event of %s failed", self.request_id)
        return event

    async def _receive(self, timeout: Optional[float]) -> Optional[dict]:
        if isinstance(self.layer, InMemoryChannelLayer):
            return await next_within(self._events, timeout)
        from django.conf import settings

        from . import worker_presence

        loop = asyncio.get_running_loop()
        heartbeat = settings.OMLX_WORKER_HEARTBEAT_SECONDS
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            # Silence is measured across calls: SSE keep-alives ask for shorter waits than this.
            wait = self._heard_at + heartbeat - loop.time()
            if deadline is not None:
                wait = min(wait, deadline - loop.time())
            event = await next_within(self._events, max(wait, 0))
            if event is None:
                if loop.time() - self._heard_at >= heartbeat:
                    self._heard_at = loop.time()
                    if self._worker is not None:
                        alive = await asyncio.to_thread(worker_presence.is_alive, self._worker)
                        if alive is False:
                            return _worker_lost_event(self._worker)
                    else:
                        alive = await asyncio.to_thread(worker_presence.any_worker_alive)
                        if alive is False:
                            return None
                    if alive is None:  # events sent meanwhile are lost: end the request
                        why = "cannot be reached while the request waited for its worker"
                        return _queue_lost_event(self._worker is not None, why)
                    run = await asyncio.to_thread(worker_presence.redis_run_id)
                    if None not in (run, self._redis_run) and run != self._redis_run:
                        why = "restarted while the request waited: its job or events were lost"
                        return _queue_lost_event(self._worker is not None, why)
                if deadline is not None and loop.time() >= deadline:
                    return None
                continue
            self._heard_at = loop.time()
            if event.get("seq", self._seq) != self._seq:  # Redis lost the events in between
                logger.warning("events of %s were lost in Redis", self.request_id)
                return _queue_lost_event(self._worker is not None, "lost events of the request")
            self._seq += 1
            self._worker = event.get("worker", self._worker)
            return event

    async def __aexit__(self, *exc) -> None:
        with _loops_lock:
            _loops.pop(self.group, None)
            if _subscriptions.get(self.group) is self:
                del _subscriptions[self.group]
        if self.channel is None:  # in-memory: nothing joined in the layer
            _run_exit_callbacks(self.request_id)
            return
        if self._reader is not None:
            self._reader.cancel()  # the layer's own clean-up of the channel (Redis: unsubscribe)
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
            self._reader = None
        try:
            await self.layer.group_discard(self.group, self.channel)
        except Exception as exc:  # Redis down: its subscription ends with the connection anyway
            logger.warning("unsubscribing from %s failed: %s", self.group, exc)
        if isinstance(self.layer, InMemoryChannelLayer):
            self.layer.channels.pop(self.channel, None)  # its queue would linger otherwise
        _run_exit_callbacks(self.request_id)


async def next_within(queue: asyncio.Queue, timeout: Optional[float]):
    """The queue's next item, or None after ``timeout`` seconds without one (None: no limit).

    A cancel is never swallowed: ``asyncio.wait_for`` before Python 3.12 returns the item instead
    when it arrived just before the cancel, and the streaming loop learns that its client left
    from that cancel (Django cancels the view's task on http.disconnect), so the stream would run
    to its end. An item that arrives as the wait times out stays in the queue.
    """
    if not queue.empty():  # no task and no timer for an item already there
        return queue.get_nowait()
    getter = asyncio.ensure_future(queue.get())
    try:
        await asyncio.wait((getter,), timeout=timeout)
    finally:  # timed out or cancelled: Queue.get leaves an item that woke it in the queue
        if not getter.done():
            getter.cancel()
    return getter.result() if getter.done() and not getter.cancelled() else None


def _queue_lost_event(accepted: bool, why: str) -> dict:
    """The event that ends a request whose Redis stopped answering or lost some of its events:
    a refusal before a worker took it, else a last delta that failed with a 503."""
    message = f"The queue (Redis) {why}"
    if not accepted:
        return {"kind": "error", "status": 503, "message": message, "code": "queue_unavailable"}
    event = _worker_lost_event("")
    event.update(error=message, status=503, code="queue_unavailable")
    return event


def _worker_lost_event(worker: str) -> dict:
    """A last delta for a request whose worker process stopped without ending it."""
    return {
        "kind": "delta",
        "index": 0,
        "text": "",
        "reasoning": "",
        "tool_calls": [],
        "token_ids": [],
        "logprobs": None,
        "finish_reason": "error",
        "usage": None,
        "error": f"the worker running this request ({worker}) stopped",
    }


_exit_callbacks: Dict[str, list] = {}
_exit_lock = threading.Lock()


def when_unsubscribed(request_id: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` once the view's subscription to ``request_id`` has closed (the request
    is over for the view, whatever the outcome)."""
    with _exit_lock:
        _exit_callbacks.setdefault(request_id, []).append(callback)


def _run_exit_callbacks(request_id: str) -> None:
    with _exit_lock:
        callbacks = _exit_callbacks.pop(request_id, [])
    for callback in callbacks:
        try:
            callback()
        except Exception:
            logger.exception("exit callback of %s failed", request_id)
