"""One model split across two ranks of MLX's ring backend on loopback (inference.distributed):
what the ranks compute equals what one process computes; a rank that dies fails its requests
and takes the model down, not the server."""

import json
import os
import re
import signal
import threading
import time

import httpx
import mlx.core as mx
import pytest

from cache import block_file
from inference.distributed.generate import greedy, greedy_batch
from inference.engine import Engine
from inference.engine.model_loader import load_model
from inference.engine.sampling_params import SamplingParams
from inference.testkit.registry import build_model
from tests.support.ring import free_ports, ring_hostfile, start_ranks, wait_ranks
from tests.support.server import ServerProcess

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42], [300, 2, 17, 90, 91]]
TOKENS = 6


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # Three layers: an uneven split (rank 0 two, rank 1 one).
    root = tmp_path_factory.mktemp("dist-models")
    return build_model(root / "tiny", "llama", "tiny", num_hidden_layers=3)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    home = tmp_path_factory.mktemp("dist-home")
    hosts = home / "hosts.json"
    entries = [{"ssh": "localhost", "ips": ["127.0.0.1"], "port": p} for p in free_ports(2)]
    entries[1]["paged_ssd_cache_dir"] = str(home / "rank1-disk")  # as another machine's own disk
    hosts.write_text(json.dumps(entries))
    server = ServerProcess(["--model-dir", str(model.parent), "--distributed", str(hosts)], home)
    server.home = home
    yield server
    server.stop()


@pytest.mark.slow  # ~35 s here; the served test below checks the same equality through the engine
def test_two_ranks_generate_what_one_process_does(model, tmp_path):
    prompts = [arg for p in PROMPTS for arg in ("--prompt", ",".join(map(str, p)))]
    argv = ["-m", "inference.distributed.generate", str(model), *prompts, "--max-tokens", str(TOKENS)]
    argv += ["--out", str(tmp_path)]
    results = wait_ranks(start_ranks(argv, ring_hostfile(tmp_path / "hosts.json", 2), 2))
    assert [code for code, _ in results] == [0, 0], results
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    one = load_model(model, "float32").model  # the reference: this process, the whole model
    assert [r["layers"] for r in ranks] == [[0, 2], [2, 3]]  # each rank ran its own layers only
    for r in ranks:
        assert r["sequential"] == [greedy(one, p, TOKENS) for p in PROMPTS]  # chunked prefill, decode
        assert r["batched"] == greedy_batch(one, PROMPTS, TOKENS)  # one left-padded batch


def _complete(url, prompt, max_tokens, out, i, **extra):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, **extra}
    out[i] = httpx.post(url + "/v1/completions", json=body, timeout=120).json()["choices"][0]["text"]


def test_served_mixed_batch_equals_one_process(server, model):
    """Two requests at once (one prefilling in chunks while the other decodes, one sampled with a
    seed): the split model's texts are one process's."""
    requests = [(PROMPTS[0] * 3, 12, {"temperature": 0}), (PROMPTS[1], 8, {"temperature": 0.8, "seed": 7})]
    texts = [None, None]
    threads = [
        threading.Thread(target=_complete, args=(server.url, p, n, texts, i), kwargs=extra)
        for i, (p, n, extra) in enumerate(requests)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine = Engine(model, dtype="float32")
    try:
        streams = [
            engine.submit(p, SamplingParams(max_tokens=n, ignore_eos=True, **extra))
            for p, n, extra in requests
        ]
        assert texts == ["".join(event.text for event in stream) for stream in streams]
    finally:
        engine.close()
    # Again at once: a hit on both ranks (each its own layers' blocks, in RAM), the same texts.
    again, cached = _served(server.url, "tiny", requests)
    assert again == texts and all(c > 0 for c in cached), cached
    log = (server.home / "logs" / "rank1.log").read_text()
    assert "256 KV bytes/token" in log  # rank 1 loaded one layer of three (rank 0 two: 512)
    # Each rank's SSD tier in its own folder: rank 1's in the one its hosts entry names.
    parts = {
        info.parent.parent.name: json.loads(info.read_text())["part"]
        for info in server.home.glob("*/*/model.json")
    }
    assert parts == {"cache": "layers:0-2/3", "rank1-disk": "layers:2-3/3"}, parts
    # Rank 0's /metrics and status page show every rank's cache: both hit the second batch.
    deadline = time.monotonic() + 30  # asked for after the step that ends the work
    while True:
        text = httpx.get(server.url + "/metrics", timeout=30).text
        hits = dict(
            re.findall(
                r'^omlx_rank_hit_tokens_total\{model="tiny",rank="(\d)",tier="hot"\} (\S+)$', text, re.M
            )
        )
        if (len(hits) == 2 and all(float(v) > 0 for v in hits.values())) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(hits) == 2 and all(float(v) > 0 for v in hits.values()), text
    assert re.search(r'^omlx_rank_memory_bytes\{kind="mlx",model="tiny",rank="1"\} [1-9]', text, re.M)
    page = httpx.get(server.url + "/admin/status/", timeout=30).text
    assert 'id="card-ranks"' in page and page.count('<td class="rank-id">') == 2
    # How the model is cut, said by the ranks themselves: rank 0 layers 0-1 of 3, rank 1 layer 2.
    assert page.count('<td class="rank-parallel">pipeline, 2 ranks</td>') == 2
    holds = re.findall(r'<td class="rank-holds">([^<]*)</td>', page)
    assert holds == ["layers 0-1 of 3", "layer 2 of 3"], holds
    info = re.findall(r"^omlx_rank_info\{(.*)\} 1\.0$", text, re.M)
    assert sorted(info) == [
        'heads="1/1",layers="0-1",layers_total="3",model="tiny",parallel="pipeline",rank="0"',
        'heads="1/1",layers="2-2",layers_total="3",model="tiny",parallel="pipeline",rank="1"',
    ], info


def test_killed_rank_fails_its_request_and_the_model_goes_down(server):
    _complete(server.url, [5, 6], 2, [None], 0)  # the model (and so the group) is loaded
    log = (server.home / "logs" / "rank1.log").read_text()
    pid = int(re.search(r"\(pid (\d+)\) waiting", log).group(1))
    body = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 100000, "ignore_eos": True, "stream": True}
    events = []
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
                if len(events) == 2:
                    os.kill(pid, signal.SIGKILL)
    assert "error" in events[-1]
    assert "distributed group stopped answering" in events[-1]["error"]["message"]
    assert httpx.get(server.url + "/health", timeout=30).json()["models"] == {"tiny": "down"}
    again = httpx.post(server.url + "/v1/completions", json={**body, "stream": False}, timeout=60)
    assert again.status_code == 503
    assert "is down" in again.json()["error"]["message"]


def _rank_pid(home):
    return int(re.search(r"\(pid (\d+)\) waiting", (home / "logs" / "rank1.log").read_text()).group(1))


@pytest.mark.slow  # ~25 s here: a server of its own (the dead rank takes its group down), the timeout
def test_a_rank_killed_before_shutdown_does_not_hold_the_exit(model, tmp_path):
    """A rank that died while the model was idle: the server's shutdown closes the model
    without it (the exchange of the close fails, or, as MLX's ring backend may leave it, never
    ends: then the wait is the timeout's) and exits 0; the log says which rank, and how it ended."""
    server = _split_server(model, tmp_path, "--distributed-timeout", "3")  # 1 s: a loaded box misses it
    try:
        _complete(server.url, [5, 6], 2, [None], 0)  # the group is loaded
        # The ranks' figures after the work (rank 0 looked the prompt up): the engine is idle.
        while not re.search(
            r'^omlx_rank_lookup_tokens_total\{model="tiny",rank="0"\} [1-9]',
            httpx.get(server.url + "/metrics", timeout=30).text,
            re.M,
        ):
            time.sleep(0.1)
        pid = _rank_pid(tmp_path)
        os.kill(pid, signal.SIGKILL)
    finally:
        code = server.stop()  # SIGTERM; killed, with its threads' stacks, when it hangs
    out = "".join(server.output)
    assert code == 0, out
    assert f"rank 1 (process {pid}): killed by signal 9 (SIGKILL)" in out, out


# -- the block cache on a split model ---------------------------------------------------------


@pytest.fixture(scope="module")
def even_model(tmp_path_factory):
    # Four layers: an even split (two each), so the ranks' KV layouts alone do not tell their
    # blocks apart: only the layer range in the fingerprint does.
    return build_model(tmp_path_factory.mktemp("dist-even") / "even", "llama", "tiny", num_hidden_layers=4)


def _split_server(model, home, *flags):
    hosts = home / "hosts.json"  # fresh ports at every start: the last group's may linger
    hosts.write_text(
        json.dumps([{"ssh": "localhost", "ips": ["127.0.0.1"], "port": p} for p in free_ports(2)])
    )
    return ServerProcess(["--model-dir", str(model.parent), "--distributed", str(hosts), *flags], home)


CACHED = [
    (PROMPTS[0] * 3, 12, {"temperature": 0}),
    (PROMPTS[2] * 4, 8, {"temperature": 0.8, "seed": 7}),
]


def _served(url, name, requests):
    """The requests at once (a mixed batch): their texts and cached prompt tokens."""
    out = [None] * len(requests)

    def one(i, prompt, n, extra):
        body = {"model": name, "prompt": prompt, "max_tokens": n, "ignore_eos": True, **extra}
        out[i] = httpx.post(url + "/v1/completions", json=body, timeout=120).json()

    threads = [threading.Thread(target=one, args=(i, *r)) for i, r in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all("choices" in o for o in out), out
    return [o["choices"][0]["text"] for o in out], [
        o["usage"]["prompt_tokens_details"]["cached_tokens"] for o in out
    ]


def _one_process(model, requests):
    engine = Engine(model, dtype="float32", prefix_cache=False)
    try:
        streams = [
            engine.submit(p, SamplingParams(max_tokens=n, ignore_eos=True, **extra))
            for p, n, extra in requests
        ]
        return ["".join(event.text for event in stream) for stream in streams]
    finally:
        engine.close()


def _drop_blocks(folder, first_token):
    """Remove the block files in ``folder`` whose tokens start with ``first_token``."""
    gone = 0
    for path in folder.glob("*/*.safetensors"):
        _, meta = mx.load(str(path), return_metadata=True)
        if block_file.decode_tokens(meta["tokens"])[0] == first_token:
            path.unlink()
            gone += 1
    return gone


@pytest.mark.slow  # ~60 s here: three starts of a server and its ranks
def test_split_cache_hits_after_a_restart_of_both_ranks(even_model, tmp_path):
    """Each rank keeps its own layers' blocks in its own fingerprint folder of the SSD tier;
    after a restart of the server and its ranks the same mixed batch hits them (read from SSD
    on both ranks), with one process's texts. A prompt whose blocks one rank lost is a miss on
    every rank, never wrong text."""
    reference = _one_process(even_model, CACHED)
    for start in range(2):
        server = _split_server(even_model, tmp_path)
        try:
            texts, cached = _served(server.url, "even", CACHED)
        finally:
            server.stop()
        assert texts == reference
        assert cached == [0, 0] if start == 0 else all(c > 0 for c in cached), cached
    parts = {}
    for info in (tmp_path / "cache").glob("*/model.json"):
        parts[json.loads(info.read_text())["part"]] = info.parent
    assert sorted(parts) == ["layers:0-2/4", "layers:2-4/4"]  # one folder per rank
    assert _drop_blocks(parts["layers:2-4/4"], 300) > 0  # rank 1 loses the second prompt's blocks
    server = _split_server(even_model, tmp_path)
    try:
        texts, cached = _served(server.url, "even", CACHED)
        # The first prompt from both ranks' SSD tiers; the second only rank 0 still has.
        assert (texts, cached[1]) == (reference, 0) and cached[0] > 0, cached
    finally:
        server.stop()


@pytest.mark.slow  # ~19 s here: a server of its own (the hang takes its model down) and the timeout
def test_stopped_rank_fails_its_request_after_the_timeout_and_the_model_goes_down(model, tmp_path):
    """A rank that hangs (SIGSTOP: its connections stay open) is found by the timeout on the
    step's exchanges: its request ends with the error, the model is down, the server stays up."""
    server = _split_server(model, tmp_path, "--distributed-timeout", "3")
    log = tmp_path / "logs" / "rank1.log"
    pid = None
    try:
        _complete(server.url, [5, 6], 2, [None], 0)  # the group is loaded
        pid = int(re.search(r"\(pid (\d+)\) waiting", log.read_text()).group(1))
        body = {
            "model": "tiny",
            "prompt": [5, 6, 7],
            "max_tokens": 100000,
            "ignore_eos": True,
            "stream": True,
        }
        events, stopped = [], None
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as response:
            for line in response.iter_lines():  # keep-alive lines come while the request waits
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
                    if len(events) == 2:
                        os.kill(pid, signal.SIGSTOP)
                        stopped = time.monotonic()
                if stopped is not None and time.monotonic() - stopped > 60:
                    break  # no error came: the hang went unnoticed
        assert "error" in events[-1], f"no error {time.monotonic() - stopped:.0f} s after the rank stopped"
        message = events[-1]["error"]["message"]
        assert "distributed group stopped answering" in message and "no answer within 3 s" in message
        assert httpx.get(server.url + "/health", timeout=30).json()["models"] == {"tiny": "down"}
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        server.stop()
