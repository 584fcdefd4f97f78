"""The pieces under the API: the relay over the in-memory channel layer, the embedded Huey
consumer (started off the main thread), and run_job's events."""

import asyncio
import shutil
import threading

import pytest
from django.test import override_settings
from huey import MemoryHuey

from inference.dispatch import relay
from inference.generation import GenerationJob, abort_job, run_job
from inference.dispatch.huey_consumer import EmbeddedConsumer
from inference.pool import close_pool, get_pool


def test_relay_keeps_order_across_threads():
    async def main():
        async with relay.Subscription("order-test") as sub:

            def produce():
                for i in range(500):
                    relay.publish("order-test", {"i": i})

            threading.Thread(target=produce).start()
            return [(await sub.receive(30))["i"] for _ in range(500)]

    assert asyncio.run(main()) == list(range(500))


def test_publish_without_a_listener_is_dropped():
    relay.publish("nobody-listens", {"i": 1})


def test_embedded_consumer_runs_tasks_from_a_worker_thread():
    huey = MemoryHuey("test-embedded")
    done = threading.Event()

    @huey.task()
    def work(x):
        done.set()
        return x * 2

    box = {}
    starter = threading.Thread(
        target=lambda: box.setdefault("consumer", EmbeddedConsumer(huey, 1, 0.01)).start()
    )
    starter.start()
    starter.join()
    try:
        result = work(21)
        assert done.wait(30)
        assert result.get(blocking=True, timeout=30) == 42
    finally:
        box["consumer"].stop(graceful=True, timeout=5)


@pytest.fixture
def tiny_registry(tmp_path, model_dir):
    shutil.copytree(model_dir("qwen2", "tiny"), tmp_path / "tiny")
    close_pool()
    with override_settings(OMLX_MODEL_DIR=tmp_path):
        yield
    close_pool()


def collect(job):
    events = []
    finished = threading.Event()

    def publish(request_id, event):
        assert request_id == job.request_id
        events.append(event)
        if event["kind"] == "error" or (event["kind"] == "delta" and event["finish_reason"]):
            finished.set()

    run_job(job, publish)
    finished.wait(60)
    return events


def test_run_job_events(tiny_registry):
    events = collect(GenerationJob("job-1", "tiny", {"max_tokens": 3, "temperature": 0}, prompts=["hi"]))
    assert events[0] == {
        "kind": "accepted",
        "prompt_tokens": [len(get_pool().engine("tiny").encode("hi"))],
        "model": "tiny",
    }
    assert [e["index"] for e in events[1:]] == [0, 0, 0]
    assert events[-1]["finish_reason"] == "length"
    assert events[-1]["usage"]["completion_tokens"] == 3


def test_run_job_refusals(tiny_registry):
    assert collect(GenerationJob("job-2", "nope", {}, prompts=["hi"]))[0]["status"] == 404
    refused = collect(GenerationJob("job-3", "tiny", {}, prompts=[[1] * 5000]))
    assert refused[0]["status"] == 400 and "context" in refused[0]["message"]


def test_abort_before_the_job_runs(tiny_registry):
    abort_job("job-4", "tiny", 1)
    events = []
    run_job(GenerationJob("job-4", "tiny", {"max_tokens": 3}, prompts=["hi"]), lambda r, e: events.append(e))
    assert events == []


def test_event_stream_closes_its_generator_when_the_response_is_closed():
    """Django closes aiter(response) when a client disconnects (as below); the event generator
    behind it must run its finally (which aborts the request) then, not whenever it is collected."""
    from contextlib import aclosing

    from inference.api.common.sse import EventStreamResponse

    closed = []

    async def events():
        try:
            while True:
                yield "data: x\n\n"
        finally:
            closed.append(True)

    async def consume_one_then_disconnect():
        response = EventStreamResponse(events())
        assert response["Content-Type"] == "text/event-stream"
        async with aclosing(aiter(response)) as content:
            async for part in content:
                assert part == b"data: x\n\n"
                break
        return list(closed)  # before the loop runs anything else

    assert asyncio.run(consume_one_then_disconnect()) == [True]


@pytest.mark.parametrize("steps", range(6))
def test_a_cancel_as_an_event_arrives_is_never_swallowed(steps):
    """The streaming loop learns that its client left from a cancel (Django cancels the view's
    task on http.disconnect). asyncio.wait_for before Python 3.12 returns the result instead when
    the awaited item arrived just before the cancel: the cancel is lost and the stream runs to
    its end. Whatever step the cancel lands on, receive() must raise it."""

    async def main():
        async with relay.Subscription("cancel-race") as sub:
            task = asyncio.ensure_future(sub.receive(30.0))
            await asyncio.sleep(0)  # the task waits on the empty queue
            sub._events.put_nowait({"kind": "delta", "index": 0})
            for _ in range(steps):  # let the wake-up travel part of the way
                await asyncio.sleep(0)
            if task.done():  # the event was delivered before the client left: nothing to lose
                return
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_a_wait_that_times_out_leaves_the_next_event_in_the_queue():
    async def main():
        queue = asyncio.Queue()
        assert await relay.next_within(queue, 0.01) is None
        queue.put_nowait("a")
        queue.put_nowait("b")
        return [await relay.next_within(queue, 0.01), await relay.next_within(queue, None)]

    assert asyncio.run(main()) == ["a", "b"]
