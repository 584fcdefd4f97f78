"""The block cache inside the engine: outputs with the cache on equal outputs with it off, and
the cache really saves prefill work."""

import pytest

from inference.engine import LLM, SamplingParams
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)
BLOCK = 8


@pytest.fixture(scope="module", params=["tiny", "tiny-close"])
def path(model_dir, request):
    """The tiny model, and its variant whose top logits are close (so a lossy cache, e.g. KV
    rounded to bfloat16, changes tokens rather than hiding behind wide margins)."""
    return model_dir(arch="qwen2", preset=request.param)


@pytest.fixture(scope="module")
def uncached(path):
    with LLM(path, prefix_cache=False) as llm:
        yield llm


def _run(llm, prompts, n=12):
    return llm.generate(prompts, SamplingParams(max_tokens=n, **GREEDY))


def test_shared_prefixes_hit_and_match(path, uncached):
    system = random_ids(45, 1)
    prompts = [system + random_ids(k, 10 + k) for k in (3, 9, 17)]
    expected = [r.token_ids for r in _run(uncached, prompts)]
    with LLM(path, cache_block_size=BLOCK) as llm:
        first = _run(llm, prompts[:1])
        assert first[0].usage.cached_tokens == 0
        rest = _run(llm, prompts[1:])
        assert [first[0].token_ids] + [r.token_ids for r in rest] == expected
        for r in rest:
            assert r.usage.cached_tokens >= 45  # the shared system prompt, partial block included
            assert r.usage.hot_cached_tokens == r.usage.cached_tokens
        again = _run(llm, prompts)
        assert [r.token_ids for r in again] == expected
        assert all(r.usage.computed_prompt_tokens == 1 for r in again)  # only the last token


def test_cached_logprobs_equal_computed_ones(path, uncached):
    """A cache that is lossy in any way (KV rounded to a smaller dtype on the way in, a shifted
    position) moves the logits: the log-probabilities of every generated token must equal the
    uncached run's to float32 rounding, not merely give the same argmax."""
    prompts = [random_ids(45, 1) + random_ids(k, 10 + k) for k in (3, 9)]
    params = SamplingParams(max_tokens=12, logprobs=0, **GREEDY)
    expected = uncached.generate(prompts, params)
    with LLM(path, cache_block_size=BLOCK) as llm:
        llm.generate(prompts[:1], params)
        got = llm.generate(prompts, params)
    for r, e in zip(got, expected):
        assert r.usage.cached_tokens >= 45
        assert r.token_ids == e.token_ids
        diffs = [abs(a.logprob - b.logprob) for a, b in zip(r.logprobs, e.logprobs)]
        assert max(diffs) < 1e-4, diffs


def test_divergence_inside_a_block_reuses_the_common_part(path):
    base = random_ids(20, 2)
    with LLM(path, cache_block_size=BLOCK) as llm:
        _run(llm, [base])
        other = base[:13] + random_ids(6, 3)
        r = _run(llm, [other])[0]
        assert r.usage.cached_tokens == 13


def test_growing_conversations_recompute_only_new_tokens(path, uncached):
    with LLM(path, cache_block_size=BLOCK) as llm:
        conversations = [random_ids(30, 4), random_ids(21, 5)]
        for turn in range(4):
            for c, history in enumerate(conversations):
                got = _run(llm, [history], n=6)[0]
                expected = _run(uncached, [history], n=6)[0]
                assert got.token_ids == expected.token_ids
                if turn > 0:
                    # Everything but the new user tokens (and the last prompt token) was cached.
                    assert got.usage.computed_prompt_tokens <= 7 + 1
                conversations[c] = history + got.token_ids + random_ids(7, 100 * turn + c)


def test_preemption_and_eviction_pressure(path, uncached):
    system = random_ids(40, 6)
    prompts = [system + random_ids(5 + 3 * i, 20 + i) for i in range(6)]
    expected = [r.token_ids for r in _run(uncached, prompts, n=16)]
    block_bytes = 2 * 2 * BLOCK * 16 * 4 * 2  # layers x (k, v) x tokens x head_dim x 4 B x kv heads
    # Not sharing in-flight prefixes, so all six run at once and the KV capacity forces
    # preemptions (tests/unit/test_engine_shared_prefill.py covers preemption with sharing on).
    with LLM(
        path,
        cache_block_size=BLOCK,
        hot_cache_max_size=3 * block_bytes,
        max_kv_tokens=130,  # (150 forced none once prompts started apart: issue 24)
        max_concurrent_requests=6,
        share_inflight_prefixes=False,
    ) as llm:
        for _ in range(2):
            assert [r.token_ids for r in _run(llm, prompts, n=16)] == expected
        cache = llm.engine.prefix_cache
        assert cache.hot.stats.evictions > 0
        assert cache.hot.used_bytes <= cache.hot.capacity_bytes
        assert llm.engine.scheduler.num_preemptions > 0


def test_forced_key_collisions_are_caught(path, uncached):
    prompts = [random_ids(30, 7), random_ids(30, 8), random_ids(30, 7)[:20] + random_ids(9, 9)]
    expected = [r.token_ids for r in _run(uncached, prompts)]
    with LLM(path, cache_block_size=BLOCK) as llm:
        llm.engine.prefix_cache.key_fn = lambda parent, tokens: b"\x01" * 32  # every key collides
        got = []
        for p in prompts:
            got += [r.token_ids for r in _run(llm, [p])]
        assert got == expected
        assert llm.engine.prefix_cache.stats.collisions > 0


def test_caching_off(path):
    with LLM(path, prefix_cache=False) as llm:
        assert not llm.engine.prefix_cache.wants_kv
        _run(llm, [random_ids(20, 1)])
        assert _run(llm, [random_ids(20, 1)])[0].usage.cached_tokens == 0


def test_a_llama_with_sliding_window_layers_is_cached(tmp_path):
    """A llama folder whose config gives it sliding-window layers (mlx-lm's RotatingKVCache)
    is split into blocks like any other: hits, and the same tokens as alone and uncached."""
    import json

    from inference.testkit.registry import build_model

    model = build_model(tmp_path / "swa", arch="llama", preset="tiny")
    config = json.loads((model / "config.json").read_text())
    config.update(layer_types=["sliding_attention", "full_attention"], sliding_window=16)
    (model / "config.json").write_text(json.dumps(config))
    prompts = [random_ids(40, 1), random_ids(40, 1)[:33] + random_ids(6, 2), random_ids(9, 3)]
    with LLM(model, prefix_cache=False) as off:
        expected = [r.token_ids for r in _run(off, prompts)]
    with LLM(model, cache_block_size=BLOCK) as llm:
        assert llm.engine.loaded.cache_layout.tags == "s16,f"
        alone = [_run(llm, [p])[0] for p in prompts]
        together = _run(llm, prompts)
    assert [r.token_ids for r in alone] == [r.token_ids for r in together] == expected
    assert alone[1].usage.cached_tokens == 33
    assert [r.usage.cached_tokens for r in together] == [39, 38, 8]


def test_bad_cache_settings(path):
    with pytest.raises(ValueError, match="hot_cache_max_size"):
        LLM(path, hot_cache_max_size="lots")
    with pytest.raises(ValueError, match="cache_block_size"):
        LLM(path, cache_block_size=0)


@pytest.mark.django_db(transaction=True)
def test_pressure_on_both_tiers(path, uncached, tmp_path):
    """A hot tier of three blocks, and a cold tier that GC keeps small: hits come from both
    tiers and from recomputing what GC removed, and outputs never change."""
    from cache import gc

    system = random_ids(40, 12)
    prompts = [system + random_ids(6 + 2 * i, 40 + i) for i in range(5)]
    expected = [r.token_ids for r in _run(uncached, prompts, n=10)]
    block_bytes = 2 * 2 * BLOCK * 16 * 4 * 2
    root = tmp_path / "ssd"
    with LLM(
        path, cache_block_size=BLOCK, hot_cache_max_size=3 * block_bytes, paged_ssd_cache_dir=str(root)
    ) as llm:
        cache = llm.engine.prefix_cache
        cold_hits = 0
        for round_ in range(3):
            for prompt, tokens in zip(prompts, expected):
                r = _run(llm, [prompt], n=10)[0]
                assert r.token_ids == tokens
                cold_hits += r.usage.cold_cached_tokens
            llm.engine.call(lambda e: e.prefix_cache.cold.flush())
            result = gc.collect(root, max_bytes=12 * block_bytes, ttl_seconds=None)
            assert result.bytes <= 12 * block_bytes
        assert cold_hits > 0
        assert cache.hot.stats.evictions > 0
        assert llm.engine.call(lambda e: e.prefix_cache.snapshot())["cold"]["writes"] > 0
