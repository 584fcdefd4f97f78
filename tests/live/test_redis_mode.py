"""Redis mode end to end: a real redis-server, `omlx serve --redis-url` with no worker threads of its
own, and the inference in another process (`omlx worker`, then `manage.py run_huey`), driven by the
official OpenAI SDK with strict response validation."""

import json
import os
import shutil
import socket
import sys
import time

import httpx
import pytest

from tests.support.redis_server import REDIS, SECRET, SKIP_REASON, Process, RedisServer
from tests.support.redis_server import start_worker as redis_worker
from tests.support.sdk_clients import openai_client
from tests.support.server import ServerProcess
from tests.support.sse_client import leave_endless_stream

pytestmark = pytest.mark.skipif(REDIS is None, reason=SKIP_REASON)

CHAT = [{"role": "user", "content": "Tell me about caching."}]
HEARTBEAT = "3"  # seconds: a killed worker is noticed within two of these


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    redis = RedisServer(tmp_path_factory.mktemp("redis"))
    yield redis.url
    redis.stop()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, model_dir, redis_url):
    models = tmp_path_factory.mktemp("redis-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path_factory.mktemp("redis-home")
    env = dict(
        os.environ,
        OMLX_HOME=str(home),
        OMLX_DATABASE=str(home / "omlx.sqlite3"),
        OMLX_LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        OMLX_REDIS_URL=redis_url,
        OMLX_MODEL_DIR=str(models),
        OMLX_WORKER_HEARTBEAT_SECONDS=HEARTBEAT,
        OMLX_REDIS_SECRET=SECRET,
    )
    for name in ("OMLX_API_KEY", "OMLX_HUEY_WORKERS", "OMLX_API_HANDOFF"):
        env.pop(name, None)
    return {"models": models, "home": home, "env": env, "redis_url": redis_url}


def start_worker(setup):
    return redis_worker(setup["redis_url"], setup["models"], setup["env"])


@pytest.fixture(scope="module")
def server(setup):
    # ServerProcess passes os.environ on. Keep-alives shorter than the heartbeat: the silence of a
    # dead worker must be noticed across the stream's many short waits.
    extra = {
        "OMLX_WORKER_HEARTBEAT_SECONDS": HEARTBEAT,
        "OMLX_SSE_KEEPALIVE_SECONDS": "1",
        "OMLX_REDIS_SECRET": SECRET,
    }
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        server = ServerProcess(
            ["--redis-url", setup["redis_url"], "--model-dir", str(setup["models"])], setup["home"]
        )
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    yield server
    server.stop()


@pytest.fixture(scope="module")
def worker(setup, server):
    # First, with no worker at all: a clear 503 at once, not a request left in the queue.
    response = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "hi"}, timeout=60)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_worker"
    worker = start_worker(setup)
    yield worker
    assert worker.stop() == 0
    assert worker.wait_for_output("omlx worker stopped", 10)


@pytest.fixture(scope="module")
def client(server, worker):
    with openai_client(server.url) as c:
        yield c


def test_the_server_runs_no_worker_of_its_own(server):
    assert any("0 worker threads in this process" in line for line in server.output)


def test_stream_and_non_stream_agree_across_processes(client, worker, server):
    reply = client.chat.completions.create(model="tiny", messages=CHAT, temperature=0, max_tokens=12)
    choice = reply.choices[0]
    assert choice.message.content and choice.finish_reason == "length"
    assert reply.usage.completion_tokens == 12

    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=CHAT,
            temperature=0,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == 12
    # The model ran in the worker: only its process loaded it.
    assert any("loaded" in line and "tiny" in line for line in worker.output)
    assert not any("omlx.engine: loaded" in line for line in server.output)


def test_metrics_of_the_server_in_redis_mode(client, server):
    """The server measures what passes through it (tokens, TTFT); it has no engines of its own, so
    the engine-side series are absent (docs/metrics.md)."""
    from prometheus_client.parser import text_string_to_metric_families

    def scrape():
        text = httpx.get(server.url + "/metrics", timeout=60).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }

    before = scrape()
    reply = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=5, extra_body={"ignore_eos": True}
    )
    after = scrape()
    key = ("omlx_generation_tokens_total", (("model", "tiny"),))
    assert after[key] - before.get(key, 0) == reply.usage.completion_tokens == 5
    ttft = ("omlx_time_to_first_token_seconds_count", (("model", "tiny"),))
    assert after[ttft] - before.get(ttft, 0) == 1
    names = {name for name, _ in after}
    assert "omlx_http_requests_total" in names
    assert not names & {"omlx_models_loaded", "omlx_requests_running", "omlx_cache_hit_tokens_total"}


def test_the_cache_salt_reaches_the_worker(client):
    """The job payload carries the salt: the worker's engine keeps salted prompts apart."""
    messages = [{"role": "user", "content": "A question asked by two tenants of one Redis worker."}]

    def cached(salt):
        reply = client.chat.completions.create(
            model="tiny", messages=messages, temperature=0, max_tokens=2, extra_body={"cache_salt": salt}
        )
        return reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens

    prompt, first = cached("tenant-a")
    assert first == 0
    assert cached("tenant-b") == (prompt, 0)
    assert cached("tenant-a") == (prompt, prompt - 1)


def test_concurrent_streams_keep_their_order(client):
    from concurrent.futures import ThreadPoolExecutor

    prompts = [f"Request number {i} says" for i in range(4)]
    alone = [
        client.completions.create(model="tiny", prompt=p, temperature=0, max_tokens=16).choices[0].text
        for p in prompts
    ]

    def stream(prompt):
        lenient = client.with_options()
        lenient._strict_response_validation = False  # as in test_api_live.test_completions
        chunks = lenient.completions.create(
            model="tiny", prompt=prompt, temperature=0, max_tokens=16, stream=True
        )
        return "".join(c.choices[0].text for c in chunks)

    with ThreadPoolExecutor(len(prompts)) as pool:
        assert list(pool.map(stream, prompts)) == alone


QUEUE_KEY = "huey.redis.omlx"  # Huey's list of queued jobs (RedisHuey named "omlx")


def generate_message(request_id):
    """Huey's message of a `generate` job for the tiny model, as the server would queue it."""
    from huey.registry import Message

    job = {"request_id": request_id, "model": "tiny", "params": {"max_tokens": 2}, "prompts": ["hi"]}
    return Message(request_id, "inference.dispatch.huey.generate", None, 0, 0, None, (job,), {})


def push_until_dropped(setup, worker, data):
    """Queue ``data`` as a job and wait until the worker has dropped it (it logs each drop)."""
    import redis

    before = sum("dropped a job" in line for line in worker.output)
    redis.Redis.from_url(setup["redis_url"]).lpush(QUEUE_KEY, data)
    deadline = time.monotonic() + 60
    while sum("dropped a job" in line for line in worker.output) == before:
        assert time.monotonic() < deadline, "the worker did not drop the job:\n" + "".join(
            worker.output[-20:]
        )
        time.sleep(0.05)


def test_a_pickled_job_in_the_queue_does_not_run(setup, worker, tmp_path):
    """Anyone who can reach the Redis can push a job: a pickle (Huey's default format) that would
    create a file when loaded is dropped unread."""
    from huey.serializer import Serializer

    witness = tmp_path / "pickle-ran"

    class Exploit:
        def __reduce__(self):
            return (open, (str(witness), "w"))

    message = generate_message("pickled-job")._replace(args=(Exploit(),))
    push_until_dropped(setup, worker, Serializer().serialize(message))
    assert not witness.exists()
    assert not any("pickled-job" in line for line in worker.output)


def test_only_jobs_signed_with_the_secret_run(setup, worker, client):
    """A job signed with the shared secret runs (so the queue is the one the worker reads); the
    same job altered, or signed with another secret, is dropped and the worker goes on."""
    import redis

    from inference.dispatch.signed_json import SignedJson

    signed = SignedJson(SECRET, "huey").dumps(generate_message("signed-job"))
    redis.Redis.from_url(setup["redis_url"]).lpush(QUEUE_KEY, signed)
    assert worker.wait_for_output("signed-job-0 finished"), "".join(worker.output[-30:])
    push_until_dropped(setup, worker, signed.replace(b"signed-job", b"altered-job"))
    other = SignedJson("another-secret-0123456789", "huey").dumps(generate_message("other-key-job"))
    push_until_dropped(setup, worker, other)
    reply = client.completions.create(model="tiny", prompt="still here", max_tokens=2)
    assert reply.usage.completion_tokens == 2
    assert not any("altered-job" in line or "other-key-job" in line for line in worker.output)


def test_a_forged_abort_on_the_channel_layer_is_dropped(setup, server, worker):
    """The channel layer's messages are signed too: an abort published by someone else (msgpack,
    channels_redis's own format) is dropped, and the stream goes on."""
    import msgpack
    import redis

    body = {"model": "tiny", "prompt": "Go on", "max_tokens": 100000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as response:
        lines = (line for line in response.iter_lines() if line.startswith("data: "))
        request_id = json.loads(next(lines)[6:])["id"]
        event = {"kind": "abort", "request_id": request_id, "model": "tiny", "count": 1}
        forged = msgpack.packb({"type": "generation.event", "event": event})
        redis.Redis.from_url(setup["redis_url"]).publish("omlx__group__omlx.control", forged)
        assert worker.wait_for_output("dropped a message on")
        later = [json.loads(next(lines)[6:]) for _ in range(5)]  # still streaming
        assert all(chunk["choices"][0]["finish_reason"] is None for chunk in later)
    assert worker.wait_for_output(f"{request_id}-0 ended: abort")  # our disconnect, only now


def test_client_disconnect_aborts_in_the_worker(server, worker):
    request_id = leave_endless_stream(server.url)
    assert worker.wait_for_output(f"{request_id}-0 ended: abort")
    assert not any(request_id in line for line in server.output)


def test_server_and_worker_write_their_own_log_files(setup, server, worker, client):
    """Each process its own JSON-lines file (a rotating file must have one writer)."""
    reply = client.completions.create(model="tiny", prompt="log me", max_tokens=3)
    logs = setup["home"] / "logs"
    worker_lines = [
        json.loads(line) for line in (logs / f"worker-{worker.process.pid}.log").read_text().splitlines()
    ]
    assert any(
        e.get("request_id") == reply.id and e.get("model") == "tiny" and e.get("completion_tokens") == 3
        for e in worker_lines
    )
    server_lines = [json.loads(line) for line in (logs / "server.log").read_text().splitlines()]
    assert any("queue and channel layer in Redis" in e["message"] for e in server_lines)
    assert not any(e.get("request_id") == reply.id for e in server_lines)


def test_manage_py_run_huey_is_a_worker_too(setup, server, worker, client):
    """`manage.py run_huey` with OMLX_REDIS_URL serves requests the same way (the `omlx worker`
    is stopped first, so the other process must be the one that answers)."""
    assert worker.stop() == 0
    runner = Process(
        [sys.executable, "manage.py", "run_huey"], setup["env"], "Huey consumer started", timeout=120
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # the stopped worker's key is gone; the new one announces itself on start
            response = httpx.post(
                server.url + "/v1/completions",
                timeout=120,
                json={"model": "tiny", "prompt": "hi", "max_tokens": 3, "temperature": 0},
            )
            if response.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] == 3
    finally:
        runner.stop()


def test_a_killed_worker_ends_its_streams_with_an_error(setup, server, worker):
    """SIGKILL leaves no abort event behind: the view notices the worker's heartbeat is gone and
    ends the stream with an error instead of waiting forever; the next request gets a 503."""
    import redis

    from inference.dispatch.worker_presence import KEY_PREFIX

    worker.stop()  # earlier tests may have replaced it; start one of our own
    doomed = start_worker(setup)
    try:
        # A worker that says it takes requests has announced itself already (else a request sent at
        # once could get "no worker": its consumer's threads announce it only once they run).
        key = f"{KEY_PREFIX}{socket.gethostname()}:{doomed.process.pid}"
        assert redis.Redis.from_url(setup["redis_url"]).exists(key)
        body = {"model": "tiny", "prompt": "Go on", "max_tokens": 4000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            doomed.process.kill()
            doomed.process.wait()
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest, "the stream ended without a word"
        last = json.loads(rest[-1][6:])
    finally:  # a failed assertion must not leave the process behind
        doomed.stop()
    assert "stopped" in last["error"]["message"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        response = httpx.post(
            server.url + "/v1/completions", json={"model": "tiny", "prompt": "hi"}, timeout=60
        )
        if response.status_code == 503:
            break
        time.sleep(0.5)
    assert response.status_code == 503  # no_worker, or "no worker took the request" if it raced
