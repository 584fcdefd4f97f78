"""A real `omlx serve` under a real OS memory limit, flooded with long prompts: it keeps
answering (at worst 503 or 429 with Retry-After, never another 5xx) and is never killed.

The limit is a memory cgroup made for the server (v2, else v1: the kernel's OOM killer acts at
it; tests/support/memory_limit.py; the kind is printed). Where no memory cgroup can be made the test
skips: RLIMIT_AS counts reserved address space, not memory in use
(tests/support/memory_limit.py). The model is a KV-heavy test
model (128 KiB of KV per token), so that the KV of a few hundred prompts (the running batch and
the hot tier's blocks) is far beyond the limit: without the guard the flood gets the server
OOM-killed in well under a minute (run with OMLX_TEST_GUARD=off to see it).

The thresholds are lower than the defaults because the margin between ``critical`` and the limit
must hold what one engine step allocates at once (joining the decode batch copies its KV), which
for this model and a 1.5 GB limit is more than a third of the limit; on a real machine the defaults leave
gigabytes.

The default run floods for FLOOD_SECONDS; the slow one for OMLX_GUARD_FLOOD_SECONDS (300) with
longer prompts.
"""

import os
import random
import shutil
import threading
import time
from collections import Counter

import httpx
import pytest

from tests.support.server import ServerProcess
from tests.support.memory_limit import MemoryLimit

LIMIT = 1500 * 2**20
FLOOD_SECONDS = 20.0
CLIENTS = 6
WORDS = "alpha beta gamma delta cache block token prefix model server memory guard limit".split()


@pytest.fixture(scope="module")
def heavy_models(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("guard-models")
    shutil.copytree(
        model_dir("llama", "tiny", num_attention_heads=16, num_key_value_heads=16, head_dim=512),
        models / "heavy",
    )
    return models


def prompt(rnd: random.Random, words: int) -> str:
    return " ".join(rnd.choice(WORDS) + str(rnd.randrange(1000)) for _ in range(words))


def flood(url: str, seconds: float, words: int, results: list, seed: int) -> None:
    """One client: long distinct prompts, one after another, through both APIs; on a 503 or
    429 it waits as long as Retry-After says."""
    rnd = random.Random(seed)
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=300) as client:
        while time.monotonic() < deadline:
            anthropic = rnd.random() < 0.5
            text = prompt(rnd, words)
            if anthropic:
                response = client.post(
                    url + "/v1/messages",
                    json={
                        "model": "heavy",
                        "max_tokens": 16,
                        "messages": [{"role": "user", "content": text}],
                    },
                )
            else:
                response = client.post(
                    url + "/v1/chat/completions",
                    json={
                        "model": "heavy",
                        "max_tokens": 16,
                        "messages": [{"role": "user", "content": text}],
                    },
                )
            body = response.json()
            results.append((response.status_code, anthropic, response.headers.get("retry-after"), body))
            if response.status_code in (429, 503):
                time.sleep(float(response.headers.get("retry-after") or 1))


def run_flood(models, tmp_path, seconds: float, words: int, clients: int):
    guard = os.environ.get("OMLX_TEST_GUARD", "on")
    limit = MemoryLimit(LIMIT)
    print(f"memory limit: {limit.kind}, {LIMIT >> 20} MiB")
    if limit.folder is None:
        pytest.skip(
            "no memory cgroup can be made here (needs a writable cgroup v2 with the memory "
            "controller, or cgroup v1's memory hierarchy)"
        )
    # The load-time check: inside the cgroup RAM is 1.5 GB, so the 'auto' process limit is half
    # of it, which the model's whole KV budget (a quarter of RAM) and hot tier (a tenth) do not
    # fit next to the server itself: it would refuse the model (507). This test is about the
    # runtime guard, whose bound is then the cgroup's limit.
    server = ServerProcess(
        [
            "--model-dir",
            str(models),
            "--memory-guard",
            guard,
            "--max-process-memory",
            "disabled",
            "--memory-guard-high",
            "0.5",
            "--memory-guard-critical",
            "0.6",
            "--memory-guard-interval",
            "0.1",
            "--max-concurrent-requests",
            "4",
        ],
        tmp_path / "home",
        preexec_fn=limit.preexec,
    )
    results = []
    try:
        first = httpx.post(
            server.url + "/v1/chat/completions",
            timeout=120,
            json={"model": "heavy", "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]},
        )
        assert first.status_code == 200, first.text
        threads = [
            threading.Thread(target=flood, args=(server.url, seconds, words, results, seed))
            for seed in range(clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        alive = server.process.poll() is None
        kills = limit.oom_kills()
        assert alive and not kills, (
            f"the server died under the flood (exit {server.process.poll()}, "
            f"OOM kills {kills}):\n" + "".join(server.output[-20:])
        )
        after = retrying(server.url)
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
        return results, after, metrics, limit
    finally:
        server.stop()
        limit.close()


def retrying(url: str, patience: float = 120.0) -> httpx.Response:
    """A request after the flood, retried as its 503s' Retry-After says: the pressure must end
    (idle, the guard shrinks what the flood left behind)."""
    deadline = time.monotonic() + patience
    while True:
        response = httpx.post(
            url + "/v1/chat/completions",
            timeout=120,
            json={
                "model": "heavy",
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "still there?"}],
            },
        )
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(float(response.headers["retry-after"]))


def guard_counts(metrics: str) -> dict:
    counts = {}
    for line in metrics.splitlines():
        if line.startswith("omlx_memory_guard_actions_total{"):
            action = line.split('action="')[1].split('"')[0]
            counts[action] = float(line.split()[-1])
    return counts


def check(results, after, metrics) -> None:
    statuses = Counter(status for status, _, _, _ in results)
    counts = guard_counts(metrics)
    print(f"answers: {dict(statuses)}; guard: {counts}")
    assert set(statuses) <= {200, 429, 503}, statuses
    assert statuses[200] > 0
    for status, anthropic, retry_after, body in results:
        if status in (429, 503):
            assert retry_after is not None and int(retry_after) >= 1
            if anthropic:
                assert body["type"] == "error" and body["error"]["type"] in (
                    "overloaded_error",
                    "rate_limit_error",
                )
            else:
                assert body["error"]["code"] in ("memory_pressure", "rate_limit_exceeded")
            if status == 503:
                assert "short of memory" in (body["error"]["message"])
    assert after.status_code == 200, after.text
    assert counts.get("preempt", 0) + counts.get("shrink", 0) > 0, "the guard never relieved memory"


def test_flooded_server_under_a_memory_limit_keeps_answering(heavy_models, tmp_path):
    results, after, metrics, _ = run_flood(heavy_models, tmp_path, FLOOD_SECONDS, 80, CLIENTS)
    check(results, after, metrics)


@pytest.mark.slow
def test_long_flood_under_a_memory_limit(heavy_models, tmp_path):
    seconds = float(os.environ.get("OMLX_GUARD_FLOOD_SECONDS", 300))
    results, after, metrics, _ = run_flood(heavy_models, tmp_path, seconds, 160, 12)
    check(results, after, metrics)
    assert guard_counts(metrics).get("reject", 0) > 0  # a long flood meets the refusal too
