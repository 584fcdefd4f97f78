"""Choosing tensor parallel (inference.distributed.tensor): the hosts file's "parallel", the
families it refuses and why, what a rank's block cache fingerprint holds, and what a rank
accepts from rank 0's load."""

import json

import mlx.core as mx
import pytest

from inference.distributed.follower import _load
from inference.distributed.hosts import read_hosts, read_parallel
from inference.distributed.layer_split import even_split
from inference.distributed.plan_channel import PlanError
from inference.distributed.tensor import TensorShard, part_component, shard_model, shardable_reason, sharder

HOSTS = [{"ssh": "localhost", "ips": ["127.0.0.1"]}, {"ssh": "mac2.local", "ips": ["10.0.0.2"]}]


def _write(tmp_path, data):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(data))
    return path


def test_the_hosts_file_chooses_tensor_or_pipeline(tmp_path):
    assert read_parallel(_write(tmp_path, HOSTS)) == "pipeline"  # mlx.launch's plain list
    assert read_parallel(_write(tmp_path, {"hosts": HOSTS})) == "pipeline"
    tensor = _write(tmp_path, {"parallel": "tensor", "hosts": HOSTS})
    assert read_parallel(tensor) == "tensor"
    assert [h.ip for h in read_hosts(tensor)] == ["127.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"parallel": "expert", "hosts": HOSTS}, '"parallel" must be one of pipeline, tensor'),
        ({"parallel": "tensor", "hosts": HOSTS, "ranks": 2}, 'an object with "hosts"'),
        ({"parallel": "tensor"}, "a list of 2 to 16 hosts"),
        ({"parallel": "tensor", "hosts": HOSTS[:1]}, "a list of 2 to 16 hosts"),
    ],
)
def test_a_bad_parallel_hosts_file_is_refused(tmp_path, data, message):
    from omlx_site.setting_checks import distributed_hosts

    with pytest.raises(ValueError, match=message):
        read_parallel(_write(tmp_path, data))
    with pytest.raises(ValueError, match=message):  # by omlx serve --distributed, before it starts
        distributed_hosts(_write(tmp_path, data))


def _llama(**overrides):
    from mlx_lm.models import llama

    fields = dict(
        model_type="llama",
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        num_attention_heads=4,
        rms_norm_eps=1e-5,
        vocab_size=64,
        num_key_value_heads=2,
    )
    return llama.Model(llama.ModelArgs(**{**fields, **overrides}))


def test_a_family_without_sharding_is_refused_with_the_reason():
    from mlx_lm.models import gemma3_text

    args = gemma3_text.ModelArgs(
        model_type="gemma3_text",
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        num_attention_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        vocab_size=64,
        num_key_value_heads=1,
    )
    with pytest.raises(ValueError, match="gemma3_text model has no tensor sharding.*pipeline parallel"):
        shard_model(gemma3_text.Model(args), mx.distributed.init())


def test_heads_that_do_not_divide_across_the_ranks_are_refused():
    assert shardable_reason(_llama(), 2) is None
    assert shardable_reason(_llama(), 4) == "its num_key_value_heads (2) does not divide across 4 ranks"
    assert "intermediate_size (65)" in shardable_reason(_llama(intermediate_size=65), 2)


def test_a_rank_fingerprint_names_its_shard_or_its_layers():
    assert part_component(TensorShard(1, 2, 24)) == "|tensor:1/2"
    assert part_component(even_split(4, 2, 1)) == "|layers:2-4/4"
    with pytest.raises(ValueError, match="parallel must be one of"):
        sharder("expert", mx.distributed.init(), [])


def test_a_rank_refuses_a_load_with_an_unknown_parallel(tmp_path):
    (tmp_path / "tiny").mkdir()
    load = {"op": "load", "model": "tiny", "dtype": None, "cache": None, "parallel": "expert"}
    with pytest.raises(PlanError, match="parallel 'expert'"):
        _load([tmp_path], load, mx.distributed.init(), None)


def test_a_hit_whose_layers_cannot_be_cut_is_a_miss_unless_every_rank_holds_it_all():
    """Tensor parallel serves families with sliding-window (or recurrent) layers, whose cached
    state of n tokens is not the first n of a longer hit: such a hit is kept whole or dropped."""
    from cache.block_cache import BlockCache
    from cache.block_key import ModelFingerprint
    from cache.prefix_cache import KVSnapshot
    from inference.distributed.rank_cache import cut_hit

    cache = BlockCache(ModelFingerprint("w", "t", "float32", "kv:1x1x4x4", 4), 1 << 20)
    keys = mx.arange(10 * 4, dtype=mx.float32).reshape(1, 1, 10, 4)
    tokens = list(range(1, 11))
    cache.store(tokens, [KVSnapshot(10, [(keys, keys + 1, 0)])])
    hit = cache.lookup(tokens, 10)
    hit.layers = [hit.layers[0], tuple(a[..., -4:, :] for a in hit.layers[0])]  # a window of 4
    assert cut_hit(cache, hit, 10) is hit  # every rank holds all 10 tokens
    assert cut_hit(cache, hit, 7) is None  # one holds 7: a miss on every rank, not a wrong window
    assert cache.stats.hot_hit_tokens == 0 and all(b.ref_count == 0 for b in cache.hot.blocks())
