"""What a rank of a split model accepts from files and from the other ranks
(inference.distributed): the hosts file, the layer split, the model a load names."""

import json

import pytest

from inference.distributed.follower import find_model
from inference.distributed.hosts import read_hosts
from inference.distributed.layer_split import even_split
from inference.distributed.plan_channel import PlanError


def test_even_split_covers_every_layer_once():
    for layers, size in [(3, 2), (7, 3), (4, 4), (28, 2)]:
        splits = [even_split(layers, size, rank) for rank in range(size)]
        assert splits[0].start == 0 and splits[-1].end == layers
        assert all(a.end == b.start for a, b in zip(splits, splits[1:]))
        assert all(s.end > s.start for s in splits)
    with pytest.raises(ValueError, match="cannot be split"):
        even_split(1, 2, 0)


def _hosts(tmp_path, data):
    path = tmp_path / "hosts.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_hosts_file_of_mlx_launch_is_read(tmp_path):
    hosts = read_hosts(
        _hosts(
            tmp_path, [{"ssh": "localhost", "ips": ["127.0.0.1"]}, {"ssh": "mac2.local", "ips": ["10.0.0.2"]}]
        )
    )
    assert [(h.ssh, h.ip, h.port, h.local) for h in hosts] == [
        ("localhost", "127.0.0.1", 32323, True),
        ("mac2.local", "10.0.0.2", 32324, False),
    ]
    assert [h.rank_cache_dir("/rank0/cache") for h in hosts] == ["/rank0/cache"] * 2


def test_a_host_names_its_own_ssd_folder(tmp_path):
    """Each machine has its own disk: a host after the first may name its rank's SSD folder, or
    "off"; the others use rank 0's folder at the same path; rank 0 off means off everywhere."""
    rank0 = {"ssh": "localhost", "ips": ["127.0.0.1"]}
    data = [
        rank0,
        {"ssh": "b", "ips": ["10.0.0.2"], "paged_ssd_cache_dir": "/Volumes/fast/omlx"},
        {"ssh": "c", "ips": ["10.0.0.3"], "paged_ssd_cache_dir": "~/omlx-cache"},
        {"ssh": "d", "ips": ["10.0.0.4"], "paged_ssd_cache_dir": "off"},
        {"ssh": "e", "ips": ["10.0.0.5"]},
    ]
    hosts = read_hosts(_hosts(tmp_path, data))
    assert [h.rank_cache_dir("/r0") for h in hosts[1:]] == ["/Volumes/fast/omlx", "~/omlx-cache", None, "/r0"]
    assert [h.rank_cache_dir(None) for h in hosts[1:]] == [None] * 4


@pytest.mark.parametrize(
    "data, message",
    [
        ("{not json", "not a readable JSON"),
        ([{"ssh": "a", "ips": ["10.0.0.1"]}], "a list of 2 to 16 hosts"),
        ([{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b; rm -rf ~", "ips": ["10.0.0.2"]}], "host name"),
        ([{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": []}], "IP addresses"),
        ([{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["$(reboot)"]}], "not an IP address"),
        ([{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["10.0.0.2"], "port": 22}], "TCP port"),
        ([{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["10.0.0.2"], "cmd": "x"}], "an object"),
        (
            [
                {"ssh": "a", "ips": ["10.0.0.1"], "paged_ssd_cache_dir": "/x"},
                {"ssh": "b", "ips": ["10.0.0.2"]},
            ],
            "--paged-ssd-cache-dir",
        ),
        (
            [
                {"ssh": "a", "ips": ["10.0.0.1"]},
                {"ssh": "b", "ips": ["10.0.0.2"], "paged_ssd_cache_dir": "rel"},
            ],
            "absolute",
        ),
        (
            [{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["10.0.0.2"], "paged_ssd_cache_dir": 7}],
            "absolute",
        ),
    ],
)
def test_bad_hosts_files_are_refused(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        read_hosts(_hosts(tmp_path, data))


def test_a_load_names_a_folder_in_the_model_dirs_never_a_path(tmp_path):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    dirs = [tmp_path / "models"]
    assert find_model(dirs, "tiny") == tmp_path / "models" / "tiny"
    for name in ["../secret", "..", str(tmp_path / "secret"), "", None, "missing"]:
        with pytest.raises(PlanError):
            find_model(dirs, name)


def test_a_model_with_sliding_window_layers_is_not_split():
    import mlx.core as mx
    from mlx_lm.models import llama

    from inference.distributed.pipeline import split_model

    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        num_attention_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=64,
        num_key_value_heads=2,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=8,
    )
    with pytest.raises(ValueError, match="full attention in every layer; it has KVCache, RotatingKVCache"):
        split_model(llama.Model(args), mx.distributed.init())


GOOD = {"prompt": [1, 2], "output": [], "params": {"max_tokens": 4, "temperature": 0.0}, "seed": 3}


def test_a_request_in_a_step_plan_is_checked():
    from inference.distributed.follower import parse_request

    request = parse_request("r1", GOOD, vocab=64)
    assert (request.prompt_token_ids, request.params.max_tokens, request.seed) == ([1, 2], 4, 3)
    assert parse_request("r1", {**GOOD, "salt": "key:7"}, vocab=64).cache_salt == "key:7"
    bad = [
        {**GOOD, "prompt": [1, 64]},  # outside the vocabulary
        {**GOOD, "prompt": []},
        {**GOOD, "output": [True]},
        {**GOOD, "params": {"max_tokens": 4, "exec": "x"}},  # not a sampling parameter
        {**GOOD, "params": {"structured": {"type": "json_object"}}},
        {**GOOD, "params": {"temperature": -1}},
        {**GOOD, "seed": -1},
        {**GOOD, "salt": ""},  # a cache salt is null or a string of 1 to 8192 characters
        {**GOOD, "salt": 7},
        [1, 2],
    ]
    for described in bad:
        with pytest.raises(PlanError):
            parse_request("r1", described, vocab=64)
    with pytest.raises(PlanError):
        parse_request("x" * 300, GOOD, vocab=64)


def test_a_drop_in_a_step_plan_is_checked():
    from inference.distributed.follower import parse_drop

    assert parse_drop({"op": "drop", "ids": ["r1"]}) == (["r1"], False)
    assert parse_drop({"op": "drop", "ids": ["r1", "r2"], "give_back": True}) == (["r1", "r2"], True)
    for bad in ({"ids": "r1"}, {"ids": ["r1"], "give_back": 1}, {"ids": ["r1"], "give_back": "yes"}):
        with pytest.raises(PlanError):
            parse_drop(bad)


def test_a_rank_makes_its_block_cache_from_checked_settings(tmp_path):
    from inference.distributed.rank_cache import follower_config

    good = {"block_size": 16, "hot": "1MB", "ssd": True, "ssd_bits": None, "kv_group_size": 64}
    config = follower_config(good, "float32", str(tmp_path))
    assert (config.cache_block_size, config.paged_ssd_cache_dir) == (16, str(tmp_path))
    assert follower_config({**good, "ssd": False}, None, str(tmp_path)).paged_ssd_cache_dir is None
    assert not follower_config(None, None, str(tmp_path)).prefix_cache  # rank 0's cache is off
    for bad in (
        {**good, "block_size": 0},
        {**good, "hot": "lots"},
        {**good, "ssd": "yes"},
        {**good, "dir": "/"},
        [1],
    ):
        with pytest.raises(PlanError):
            follower_config(bad, None, str(tmp_path))


def test_a_hit_is_cut_to_what_every_rank_holds():
    import mlx.core as mx

    from cache.block_cache import BlockCache
    from cache.block_key import ModelFingerprint
    from cache.prefix_cache import KVSnapshot
    from inference.distributed.rank_cache import cut_hit

    cache = BlockCache(ModelFingerprint("w", "t", "float32", "kv:1x1x4x4", 4), 1 << 20)
    keys = mx.arange(10 * 4, dtype=mx.float32).reshape(1, 1, 10, 4)
    tokens = list(range(1, 11))
    cache.store(tokens, [KVSnapshot(10, [(keys, keys + 1, 0)])])
    hit = cache.lookup(tokens, 10)
    assert (hit.num_tokens, cache.stats.hot_hit_tokens) == (10, 10)
    hit = cut_hit(cache, hit, 7)  # another rank holds 7 tokens
    assert (hit.num_tokens, hit.hot_tokens, cache.stats.hot_hit_tokens) == (7, 7, 7)
    assert hit.layers[0][0].tolist() == keys[..., :7, :].tolist()
    assert hit.layers[0][1].tolist() == (keys + 1)[..., :7, :].tolist()
    assert cut_hit(cache, hit, 0) is None  # another rank holds none: released, not counted
    assert cache.stats.hot_hit_tokens == 0 and all(b.ref_count == 0 for b in cache.hot.blocks())


def test_the_watchdog_shuts_the_ring_connections_only():
    import socket

    from inference.distributed.hosts import Host
    from inference.distributed.watchdog import shut_ring_connections

    def listener():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        return s

    ring_port, own_port, other_port = listener(), listener(), listener()
    hosts = [
        Host("localhost", "127.0.0.1", own_port.getsockname()[1]),
        Host("localhost", "127.0.0.1", ring_port.getsockname()[1]),
    ]
    outgoing = socket.create_connection(ring_port.getsockname())  # rank 0 to rank 1's ring port
    incoming_peer = socket.create_connection(own_port.getsockname())  # rank 1 to rank 0's
    incoming, _ = own_port.accept()
    other = socket.create_connection(other_port.getsockname())  # e.g. an HTTP client's
    sockets = [ring_port, own_port, other_port, outgoing, incoming_peer, incoming, other]
    try:
        assert shut_ring_connections(hosts) >= 2
        assert outgoing.recv(1) == b"" and incoming.recv(1) == b""  # shut: reads end at once
        other.sendall(b"x")
        assert other_port.accept()[0].recv(1) == b"x"  # still connected
    finally:
        for s in sockets:
            s.close()
