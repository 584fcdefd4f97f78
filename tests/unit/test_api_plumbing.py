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
