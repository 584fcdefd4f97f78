"""Prefix-aware routing across workers (docs/operations.md "Several workers behind one server"):
a real redis-server, `omlx serve --redis-url`, two `omlx worker`s that share one cold-tier folder
(each with its own home and database, as on two machines), and a third started fresh at the end."""

import re
import signal
import sys
import time

import httpx
import openai
import pytest

from tests.live.test_redis_mode import redis_url, server, setup  # noqa: F401  (fixtures)
from tests.support.redis_server import REDIS, SECRET, Process

pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")

SYSTEM = (
    "You are a careful coding agent working in a large repository. Read the files you are shown, "
    "keep your answers short, call tools when you need to, and never invent file names. "
) * 3


def start_worker(setup, name, tmp_path_factory):  # noqa: F811
    home = tmp_path_factory.mktemp(f"worker-{name}")
    env = dict(setup["env"], OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
    argv = [sys.executable, "-m", "omlx_site.cli", "worker", "--redis-url", setup["redis_url"]]
    argv += ["--model-dir", str(setup["models"]), "--paged-ssd-cache-dir", str(setup["home"] / "shared-cold")]
    return Process(argv, env, "taking requests from")


@pytest.fixture(scope="module")
def workers(setup, server, tmp_path_factory):  # noqa: F811
    started = [start_worker(setup, name, tmp_path_factory) for name in "ab"]
    wait_for_workers(server, {w.process.pid for w in started})
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGCONT)
            worker.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def client(server, workers):  # noqa: F811
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def metrics(server):  # noqa: F811
    """{(name, labels text): value} of the server's /metrics."""
    out = {}
    for line in httpx.get(server.url + "/metrics", timeout=30).text.splitlines():
        match = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if match:
            out[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return out


def pid_of(labels):
    return int(re.search(r'worker="[^"]*:(\d+)"', labels).group(1))


def decisions(server, reason=None):  # noqa: F811
    """{(worker pid, reason): requests routed} so far."""
    out = {}
    for (name, labels), value in metrics(server).items():
        if name == "omlx_route_decisions_total":
            why = re.search(r'reason="(\w+)"', labels).group(1)
            out[(pid_of(labels), why)] = value
    return out


def wait_for_workers(server, pids, timeout=60):  # noqa: F811
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        up = {pid_of(labels) for (name, labels) in metrics(server) if name == "omlx_worker_up"}
        if up == set(pids):
            return
        time.sleep(0.2)
    raise AssertionError(f"workers {pids} not all up: {up}")


def ask(client, messages, **extra):
    reply = client.chat.completions.create(
        model="tiny", messages=messages, temperature=0, max_tokens=8, **extra
    )
    return reply, reply.usage.prompt_tokens_details.cached_tokens


def routed_to(server, before):  # noqa: F811
    """The one (pid, reason) whose count grew since ``before``."""
    after = decisions(server)
    grown = [k for k, v in after.items() if v > before.get(k, 0)]
    assert len(grown) == 1, (before, after)
    return grown[0]


def test_a_conversation_stays_on_the_worker_holding_its_prefix(client, server, setup):  # noqa: F811
    """Four conversations of three turns: every later turn goes to the worker that ran the first
    (a "prefix" decision) and reuses its prompt from that worker's cache. Each worker publishes
    what a row of its decode steps costs, as it measured it (the router weighs its queue so)."""
    homes = {}
    for turn in range(3):
        for conv in range(4):
            messages = [{"role": "system", "content": f"Conversation {conv}. {SYSTEM}"}]
            for t in range(turn + 1):
                messages.append({"role": "user", "content": f"Step {t}: list the files."})
                if t < turn:
                    messages.append({"role": "assistant", "content": f"Answer {t}."})
            before = decisions(server)
            reply, cached = ask(client, messages)
            pid, reason = routed_to(server, before)
            if turn == 0:
                homes[conv] = pid
                continue
            assert (pid, reason) == (homes[conv], "prefix")
            assert cached > reply.usage.prompt_tokens // 2
    assert len(set(homes.values())) == 2, "the first turns spread over both workers (least loaded)"
    seen = metrics(server)  # what the router expected: later turns held most of their prompt
    tokens = {k: 0.0 for k in ("prompt", "held")}
    for (name, labels), value in seen.items():
        if name == "omlx_route_tokens_total":
            tokens[re.search(r'kind="(\w+)"', labels).group(1)] += value
    assert 0.4 * tokens["prompt"] < tokens["held"] < tokens["prompt"], tokens
    queued = [v for (name, _), v in seen.items() if name == "omlx_route_queued_work"]
    assert len(queued) == 2 and not any(queued), queued  # every request has ended
    import redis

    from inference.dispatch import worker_summary

    deadline = time.monotonic() + 30  # published after a job, then every heartbeat / 3
    while True:
        summaries, _ = worker_summary.read_all(redis.Redis.from_url(setup["redis_url"]), SECRET)
        rows = [s.decode_row_tokens for s in summaries.values()]
        if (len(rows) == 2 and all(rows)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(rows) == 2 and all(0 < row < 100 for row in rows), rows
    shown = [v for (name, _), v in metrics(server).items() if name == "omlx_worker_decode_row_tokens"]
    assert sorted(shown) == pytest.approx(sorted(rows), rel=0.5), (shown, rows)  # /metrics shows them


def test_the_status_page_lists_the_workers(client, server, workers):  # noqa: F811
    """The console (no key: open on loopback) shows each worker, its model and its hit rates."""
    for name in "xy":  # a new conversation each: one per worker, both load the model
        ask(client, [{"role": "user", "content": f"Status {name}"}])
    deadline = time.monotonic() + 30  # the workers publish what they loaded within a heartbeat / 3
    while True:
        page = httpx.get(server.url + "/admin/status/", timeout=30).text
        if page.count("<td>tiny</td>") == len(workers) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert 'id="card-workers"' in page
    for worker in workers:
        assert f'<td class="worker-id">{worker_label(worker)}</td>' in page
    assert page.count("<td>tiny</td>") == len(workers)


def test_workers_of_one_shared_folder_publish_one_tier(setup, workers):  # noqa: F811
    """Both workers point --paged-ssd-cache-dir at one folder: their summaries name one SSD tier,
    the id in that folder (the router counts a prefix one of them stored for both)."""
    import redis

    from inference.dispatch import worker_summary
    from inference.dispatch.cold_tier_id import FILE

    client = redis.Redis.from_url(setup["redis_url"])
    names = {worker_label(w) for w in workers}
    deadline = time.monotonic() + 30  # a summary lapses when a loaded machine publishes late
    while True:
        summaries, refused = worker_summary.read_all(client, SECRET)
        if names <= set(summaries) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    tiers = {summaries[name].cold_tier for name in names}
    assert tiers == {(setup["home"] / "shared-cold" / FILE).read_text().strip()} and refused == 0


def test_forged_summaries_are_refused(client, server, setup):  # noqa: F811
    """A worker that publishes no summary signed with the secret gets no request, whatever it
    claims: here presence keys and summaries that claim the request's prefix, unsigned, signed
    with another secret, too large, or copied from the real worker that holds it. Any of them
    accepted would win the request (longest match, or a tie with nothing sent to it yet) and never
    answer."""
    import redis as redis_py

    from inference.dispatch import worker_summary
    from inference.dispatch.route_keys import route_keys
    from inference.dispatch.signed_json import SignedJson

    messages = [{"role": "system", "content": f"Forgery. {SYSTEM}"}, {"role": "user", "content": "Hi"}]
    ask(client, messages)
    messages += [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "More"}]
    job = {"model": "tiny", "messages": messages, "tools": None, "tool_choice": None}
    keys = route_keys(dict(job, cache_salt=None, chat_template_kwargs={}))
    r = redis_py.Redis.from_url(setup["redis_url"])
    deadline = time.monotonic() + 30
    while True:  # the real worker that ran the first turn publishes its keys
        summaries, _ = worker_summary.read_all(r, SECRET)
        holder = next((s for s in summaries.values() if keys[1] in s.keys), None)
        if holder is not None:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    claim = dict(vars(holder), keys=keys)
    forged = {
        "ghost:1": b'{"worker": "ghost:1"}',
        "ghost:2": SignedJson("another-secret-0123456789", "summary").dumps(dict(claim, worker="ghost:2")),
        "ghost:3": SignedJson(SECRET, "summary").dumps(dict(claim, worker="ghost:3", keys=keys * 9000)),
        "ghost:4": r.get(worker_summary.KEY_PREFIX + holder.worker),  # posing as another worker
    }
    for worker, data in forged.items():
        r.set("omlx:worker:" + worker, "1", ex=60)
        r.set(worker_summary.KEY_PREFIX + worker, data, ex=60)
    try:
        refused = ("omlx_route_summaries_refused_total", "")
        before = metrics(server).get(refused, 0)
        deadline = time.monotonic() + 30
        while metrics(server)[refused] < before + len(forged):  # the server has read them all
            assert time.monotonic() < deadline
            time.sleep(0.1)
        reply, _ = ask(client, messages, timeout=20)
        assert reply.choices[0].message.content
        # A new conversation goes to the least loaded worker sent fewest requests: never a ghost.
        ask(client, [{"role": "user", "content": "A new conversation."}], timeout=20)
    finally:
        for worker in forged:
            r.delete("omlx:worker:" + worker, worker_summary.KEY_PREFIX + worker)


def test_forged_and_expired_routed_jobs_are_dropped(setup, workers):
    """A job not signed with the secret, and a signed one queued too long ago (by Redis's clock: a
    replayed recording), are dropped by the worker that takes them, never run."""
    import redis as redis_py

    from inference.dispatch import routed_queue
    from inference.dispatch.signed_json import SignedJson

    job = {"request_id": "forged-routed", "model": "tiny", "params": {"max_tokens": 2}, "prompts": ["hi"]}
    r = redis_py.Redis.from_url(setup["redis_url"])
    now = r.time()[0]
    before = sum("dropped a job" in line for w in workers for line in w.output)
    forged = SignedJson("another-secret-0123456789", "job").dumps({"job": job, "at": now})
    stale = SignedJson(SECRET, "job").dumps({"job": job, "at": now - routed_queue.JOB_EXPIRES_SECONDS - 1})
    r.rpush(routed_queue.ANY, forged, stale)
    deadline = time.monotonic() + 30
    while sum("dropped a job" in line for w in workers for line in w.output) < before + 2:
        assert time.monotonic() < deadline, "the workers did not drop both jobs"
        time.sleep(0.1)


def test_a_dead_workers_requests_go_elsewhere(client, server, workers):  # noqa: F811
    """A request routed to a worker that stops before taking it (here frozen by SIGSTOP, then its
    heartbeat expires) is taken over by the other worker and served."""
    messages = [{"role": "system", "content": f"Orphan. {SYSTEM}"}, {"role": "user", "content": "Go"}]
    before = decisions(server)
    ask(client, messages)
    pid, _ = routed_to(server, before)
    doomed = next(w for w in workers if w.process.pid == pid)
    doomed.process.send_signal(signal.SIGSTOP)
    try:
        messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Again"}]
        before = decisions(server)
        reply, _ = ask(client, messages)  # routed to the frozen worker, served by the other
        assert routed_to(server, before) == (pid, "prefix")
        assert reply.choices[0].message.content
    finally:
        doomed.process.kill()
        doomed.process.wait()
    workers.remove(doomed)


def test_a_fresh_worker_restores_a_prefix_from_the_shared_cold_tier(
    client,
    server,
    setup,
    workers,
    tmp_path_factory,  # noqa: F811
):
    """Blocks the first workers wrote to the shared folder are found by a worker started after
    them, with a database of its own: it serves the known prefix from SSD."""
    messages = [{"role": "system", "content": f"Conversation 0. {SYSTEM}"}]
    messages.append({"role": "user", "content": "Step 0: list the files."})
    for worker in workers:
        assert worker.stop() == 0  # a clean exit: queued cold writes are flushed
    workers.clear()
    fresh = start_worker(setup, "fresh", tmp_path_factory)
    workers.append(fresh)
    wait_for_workers(server, {fresh.process.pid})
    reply, cached = ask(client, messages)
    assert cached > reply.usage.prompt_tokens // 2
    label = f'{{tier="cold",worker="{worker_label(fresh)}"}}'
    deadline = time.monotonic() + 30  # the worker publishes its counters every heartbeat / 3
    while metrics(server).get(("omlx_worker_hit_tokens_total", label)) != cached:
        assert time.monotonic() < deadline, metrics(server)
        time.sleep(0.2)


def worker_label(process):
    import socket

    return f"{socket.gethostname()}:{process.process.pid}"
