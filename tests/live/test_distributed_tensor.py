"""One model sharded across two ranks of MLX's ring backend on loopback, tensor parallel
(inference.distributed.tensor): every rank runs every layer on its share of the heads and MLP
columns; what the ranks compute equals what one process computes, served in a mixed batch and
again from the block cache (each rank holding its own heads' KV)."""

import json

import httpx
import pytest

from inference.distributed.generate import greedy, greedy_batch
from inference.engine.model_loader import load_model
from inference.testkit.registry import build_model
from tests.live.test_distributed import CACHED, PROMPTS, TOKENS, _one_process, _served
from tests.support.ring import free_ports, ring_hostfile, start_ranks, wait_ranks
from tests.support.server import ServerProcess


def _model(tmp_path_factory, arch):
    if arch in ("qwen3_moe", "gpt_oss"):
        pytest.importorskip("transformers")  # the testkit builds them with transformers' classes
    return build_model(tmp_path_factory.mktemp(f"tp-{arch}") / arch, arch, "tiny")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    model = _model(tmp_path_factory, "llama")
    # Beside it, a model whose 3 heads do not divide across two ranks.
    build_model(
        model.parent / "odd", "llama", "tiny", hidden_size=96, num_attention_heads=3, num_key_value_heads=3
    )
    return model


@pytest.mark.slow  # ~35 s here per family: two processes load the model and generate
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3_moe", "gpt_oss"])
def test_two_sharded_ranks_generate_what_one_process_does(arch, tmp_path_factory, tmp_path):
    """llama and qwen2 (biased projections); qwen3_moe (its experts sharded); gpt_oss (sliding
    window layers, attention sinks, experts)."""
    model = _model(tmp_path_factory, arch)
    prompts = [arg for p in PROMPTS for arg in ("--prompt", ",".join(map(str, p)))]
    argv = ["-m", "inference.distributed.generate", str(model), *prompts, "--max-tokens", str(TOKENS)]
    argv += ["--out", str(tmp_path), "--parallel", "tensor"]
    results = wait_ranks(start_ranks(argv, ring_hostfile(tmp_path / "hosts.json", 2), 2))
    assert [code for code, _ in results] == [0, 0], results
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    loaded = load_model(model, "float32")  # the reference: this process, the whole model
    one = loaded.model
    for r in ranks:
        assert (r["parallel"], r["layers"]) == ("tensor", [0, len(one.layers)])  # every layer on every rank
        assert r["kv_bytes_per_token"] * 2 == loaded.kv_bytes_per_token  # half the KV heads each
        assert r["sequential"] == [greedy(one, p, TOKENS) for p in PROMPTS]  # chunked prefill, decode
        assert r["batched"] == greedy_batch(one, PROMPTS, TOKENS)  # one left-padded batch


def _tensor_server(model, home):
    hosts = home / "hosts.json"  # fresh ports at every start: the last group's may linger
    ranks = [{"ssh": "localhost", "ips": ["127.0.0.1"], "port": p} for p in free_ports(2)]
    hosts.write_text(json.dumps({"parallel": "tensor", "hosts": ranks}))
    return ServerProcess(["--model-dir", str(model.parent), "--distributed", str(hosts)], home)


def test_tensor_parallel_serves_a_mixed_batch_as_one_process_and_hits_its_cache(llama, tmp_path):
    """Two requests at once (one prefilling in chunks while the other decodes, one sampled with
    a seed), served by the model sharded across two ranks: one process's texts; the same again
    hits the block cache on both ranks (each its own heads' blocks), with the same texts. A
    model whose heads do not divide across the ranks is refused first, saying why."""
    server = _tensor_server(llama, tmp_path)
    try:
        refused = httpx.post(
            server.url + "/v1/completions", json={"model": "odd", "prompt": [1, 2]}, timeout=120
        )
        texts, cached = _served(server.url, "llama", CACHED)  # the group serves the next model
        again, cached_again = _served(server.url, "llama", CACHED)
        page = httpx.get(server.url + "/admin/status/", timeout=30).text
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
    finally:
        server.stop()
    # The status page and /metrics say how the model is cut: every layer, half the heads each.
    assert page.count('<td class="rank-parallel">tensor, 2 ranks</td>') == 2
    assert page.count('<td class="rank-holds">all 2 layers, 1/2 of the heads</td>') == 2
    for rank in range(2):
        labels = f'heads="1/2",layers="0-1",layers_total="2",model="llama",parallel="tensor",rank="{rank}"'
        assert f"omlx_rank_info{{{labels}}} 1.0" in metrics
    message = refused.json()["error"]["message"]
    assert "cannot shard llama for tensor parallel: its num_attention_heads (3) does not divide" in message
    assert texts == _one_process(llama, CACHED)
    assert cached == [0, 0] and again == texts and all(c > 0 for c in cached_again), cached_again
    log = (tmp_path / "logs" / "rank1.log").read_text()
    assert "(tensor parallel)" in log and "256 KV bytes/token" in log  # half of one process's 512
    parts = {json.loads(info.read_text())["part"] for info in (tmp_path / "cache").glob("*/model.json")}
    assert parts == {"tensor:0/2", "tensor:1/2"}  # each rank's blocks under its own shard


@pytest.mark.slow  # ~60 s here: two starts of a server and its ranks
def test_tensor_parallel_hits_its_ssd_blocks_after_a_restart_of_both_ranks(llama, tmp_path):
    """Each rank's heads' blocks are written to its own directory of the SSD tier; after a
    restart of the server and its ranks the same mixed batch hits them on both, with one
    process's texts."""
    reference = _one_process(llama, CACHED)
    for start in range(2):
        server = _tensor_server(llama, tmp_path)
        try:
            texts, cached = _served(server.url, "llama", CACHED)
        finally:
            server.stop()
        assert texts == reference
        assert cached == [0, 0] if start == 0 else all(c > 0 for c in cached), cached


# A prompt that starts with CACHED's first one: a hit on that prefix, the rest computed.
EXTENDED = (PROMPTS[0] * 3 + [60, 61, 62, 63], 6, {"temperature": 0})


@pytest.mark.parametrize(
    "arch",
    [
        "qwen2",
        pytest.param("qwen3_moe", marks=pytest.mark.slow),  # ~40 s here: the sharded experts
        pytest.param("gpt_oss", marks=pytest.mark.slow),  # ~40 s here: sliding windows, sinks, experts
    ],
)
def test_tensor_parallel_block_cache_of_other_families(arch, tmp_path_factory, tmp_path):
    """Served sharded across two ranks with the block cache, as llama is above: one process's
    texts in a mixed batch; the same again and a prompt that extends one of them hit the RAM
    tier of both ranks (each its own heads' blocks), with one process's texts."""
    model = _model(tmp_path_factory, arch)
    name = model.name
    reference = _one_process(model, CACHED + [EXTENDED])
    server = _tensor_server(model, tmp_path)
    try:
        texts, cached = _served(server.url, name, CACHED)
        again, cached_again = _served(server.url, name, CACHED + [EXTENDED])
    finally:
        server.stop()
    assert texts == reference[:2] and cached == [0, 0], cached
    assert again == reference and all(c > 0 for c in cached_again), cached_again
    parts = {json.loads(info.read_text())["part"] for info in (tmp_path / "cache").glob("*/model.json")}
    assert parts == {"tensor:0/2", "tensor:1/2"}


@pytest.mark.slow  # ~40 s here per family: two starts of a server and its ranks
@pytest.mark.parametrize("arch", ["qwen2", "qwen3_moe", "gpt_oss"])
def test_tensor_parallel_cold_hits_of_other_families_after_a_restart(arch, tmp_path_factory, tmp_path):
    """After a restart of the server and both ranks, the prompts (and one that extends one of
    them) are served from each rank's SSD blocks of its heads, with one process's texts."""
    model = _model(tmp_path_factory, arch)
    reference = _one_process(model, CACHED + [EXTENDED])
    for start, requests in enumerate([CACHED, CACHED + [EXTENDED]]):
        server = _tensor_server(model, tmp_path)
        try:
            texts, cached = _served(server.url, model.name, requests)
        finally:
            server.stop()
        assert texts == reference[: len(requests)]
        assert cached == [0, 0] if start == 0 else all(c > 0 for c in cached), cached
