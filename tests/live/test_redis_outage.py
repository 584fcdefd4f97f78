"""Redis going away in Redis mode (docs/operations.md "When Redis goes away"): a real redis-server
that the tests kill and start again on the same port, `omlx serve --redis-url` and one
`omlx worker`. A request submitted while Redis is down, or waiting for its stream when it goes
down, gets a 503 (OpenAI and Anthropic error shapes) or, once its stream has started, an error
event that ends it: never a 500 and never a hang. The server serves again once Redis is back.

    PYTHONPATH=$PWD .venv/bin/python -m pytest -m slow tests/live/test_redis_outage.py"""

import json
import os
import shutil
import signal
import threading
import time

import httpx
import pytest

from tests.support.redis_server import REDIS, SECRET, RedisServer, start_worker
from tests.support.server import ServerProcess

# About a minute (a server and a worker start, Redis restarts four times): not the default run.
pytestmark = [pytest.mark.skipif(REDIS is None, reason="redis-server is not installed"), pytest.mark.slow]

HEARTBEAT = "2"  # seconds: a silent stream asks Redis after this long
WAIT = 30  # seconds a request may take before the test calls it a hang
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me about caching."}]}
LONG = dict(CHAT, max_tokens=3000, ignore_eos=True, temperature=0)  # runs for seconds
MESSAGES = {"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "Hello"}]}


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis-outage"))
    yield server
    server.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir, redis):
    models = tmp_path_factory.mktemp("outage-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path_factory.mktemp("outage-home")
    env = {
        "OMLX_WORKER_HEARTBEAT_SECONDS": HEARTBEAT,
        "OMLX_SSE_KEEPALIVE_SECONDS": "1",
        "OMLX_REDIS_SECRET": SECRET,
        "OMLX_HUEY_WORKERS": None,
        "OMLX_API_HANDOFF": None,
    }
    served = ServerProcess(["--redis-url", redis.url, "--model-dir", str(models)], home, env=env)
    worker_env = dict(os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
    worker_env.update({k: v for k, v in env.items() if v is not None}, PYTHONUNBUFFERED="1")
    for name in ("OMLX_API_KEY", "OMLX_HUEY_WORKERS", "OMLX_API_HANDOFF"):
        worker_env.pop(name, None)
    worker = start_worker(redis.url, models, worker_env)
    served.worker = worker
    yield served
    worker.stop(signal.SIGKILL)
    served.stop()


@pytest.fixture(autouse=True)
def redis_up(redis):
    """Each test starts with Redis up, whatever the one before it left."""
    if not redis.running():
        redis.start()


def post(server, path, body, **extra):
    return httpx.post(server.url + path, json=body, timeout=WAIT, **extra)


def served_again(server, deadline=60.0):
    """Wait until a chat request is answered 200 again (Redis back, the worker beating again)."""
    end = time.monotonic() + deadline
    while True:
        response = post(server, "/v1/chat/completions", dict(CHAT, max_tokens=4))
        if response.status_code == 200:
            return response
        logs = "".join(server.output[-40:] + server.worker.output[-40:])
        assert response.status_code == 503, response.text + logs  # never a 500 on the way back
        assert time.monotonic() < end, f"not served {deadline}s after Redis came back: {response.text}"
        time.sleep(0.5)


def assert_openai_503(response):
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "queue_unavailable" and "Redis" in error["message"], error
    assert error["type"] == "server_error"


def test_a_request_submitted_while_redis_is_down_gets_a_503(server, redis):
    """Right after Redis dies (the server's last look found it alive, less than a second ago),
    then a while later: chat, streamed chat, Anthropic messages, all 503."""
    served_again(server)
    redis.kill()
    for attempt in range(2):
        assert_openai_503(post(server, "/v1/chat/completions", dict(CHAT, max_tokens=4)))
        assert_openai_503(post(server, "/v1/chat/completions", dict(CHAT, max_tokens=4, stream=True)))
        response = post(server, "/v1/messages", MESSAGES, headers={"anthropic-version": "2023-06-01"})
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
        assert "Redis" in body["error"]["message"]
        time.sleep(1.5)  # past the server's reuse of its last look at the workers
    redis.start()
    assert served_again(server).json()["choices"][0]["message"]["content"] is not None


def test_a_redis_that_refuses_the_job_gives_a_503(server, redis):
    """Redis out of memory (maxmemory 1, no eviction): it still answers, subscribes and publishes,
    but refuses to queue the job. A 503 that says so; served again once it has room."""
    import redis as redis_py

    served_again(server)
    admin = redis_py.Redis.from_url(redis.url)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1")
    try:
        response = post(server, "/v1/chat/completions", dict(CHAT, max_tokens=4))
        assert_openai_503(response)
        assert "refused" in response.json()["error"]["message"]
    finally:
        admin.config_set("maxmemory", "0")
    served_again(server)


def test_a_stream_whose_redis_goes_down_ends_with_an_error(server, redis):
    """A long streamed generation: Redis dies after its first chunks; the stream ends with an
    error chunk that says so, within a few heartbeats; then Redis comes back and serves."""
    served_again(server)
    chunks, started = [], time.monotonic()
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json=dict(LONG, stream=True), timeout=WAIT
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            assert time.monotonic() - started < WAIT, "the stream goes on (keep-alives): a hang"
            if not line.startswith("data: "):
                continue
            chunks.append(line[6:])
            if len(chunks) == 3:
                redis.kill()
                killed = time.monotonic()
    assert len(chunks) >= 3, chunks
    error = json.loads(chunks[-1])["error"]
    assert error["code"] == "queue_unavailable" and "Redis" in error["message"], error
    assert "[DONE]" not in chunks
    assert time.monotonic() - killed < 4 * float(HEARTBEAT) + 5, "the error came late"
    assert time.monotonic() - started < WAIT
    redis.start()
    served_again(server)


def test_a_request_waiting_for_its_answer_when_redis_goes_down_gets_a_503(server, redis):
    """A long generation without streaming: Redis dies while it runs; the answer is a 503."""
    served_again(server)
    out = {}
    thread = threading.Thread(target=lambda: out.update(r=post(server, "/v1/chat/completions", LONG)))
    thread.start()
    time.sleep(1.0)  # taken and running (the model is loaded)
    redis.kill()
    thread.join(WAIT + 5)
    assert not thread.is_alive(), "the request hangs"
    assert_openai_503(out["r"])
    redis.start()
    served_again(server)
    assert server.process.poll() is None and server.worker.process.poll() is None


def test_a_request_running_while_redis_restarts_gets_a_503(server, redis):
    """Redis killed and started again at once under a long generation: the events sent while it
    was down are lost, so the answer is a 503, not a reply with a hole in it."""
    served_again(server)
    out = {}
    thread = threading.Thread(target=lambda: out.update(r=post(server, "/v1/chat/completions", LONG)))
    thread.start()
    time.sleep(1.0)
    redis.kill()
    redis.start()
    thread.join(WAIT + 5)
    assert not thread.is_alive(), "the request hangs"
    assert_openai_503(out["r"])
    assert "lost" in out["r"].json()["error"]["message"]
    served_again(server)
