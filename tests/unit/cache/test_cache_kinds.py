"""The block cache on models whose layers are not all full attention (and, for comparison, on a
plain one, qwen2): sliding windows (gemma3_text,
gpt_oss), Gated DeltaNet (qwen3_5) and Mamba2 (nemotron_h) recurrent layers, MoE (gpt_oss) and a
4-bit quantized folder. Greedy output with the cache on equals the output with it off in every
situation a hit can arise, and restored caches are bit-identical to what the engine stored."""

import json
import shutil
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from inference.engine import LLM, SamplingParams
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)
BLOCK = 8
FAMILIES = ["qwen2", "gemma3_text", "gpt_oss", "qwen3_5", "nemotron_h", "qwen3_5-4bit"]


@pytest.fixture(scope="module")
def family_dir(model_dir, tmp_path_factory):
    """family_dir(name) -> the folder of a tiny model of that family ("-4bit": quantized)."""
    from inference.testkit.quantize import quantize_model

    built = {}

    def get(name):
        if name not in built:
            arch, _, quant = name.partition("-")
            path = model_dir(arch=arch, preset="tiny")
            if quant:
                path = quantize_model(path, tmp_path_factory.mktemp(name) / "model", bits=int(quant[:-3]))
            built[name] = path
        return built[name]

    return get


def _run(llm, prompts, n=10):
    return llm.generate(prompts, SamplingParams(max_tokens=n, **GREEDY))


def _tokens(results):
    return [r.token_ids for r in results]


def _has_state(llm) -> bool:
    return llm.engine.loaded.cache_layout.has_state


@pytest.mark.parametrize("family", FAMILIES)
def test_cache_on_equals_off(family, family_dir, tmp_path):
    """Repeated prompts, prompts sharing a prefix, a hit ending inside a block and a growing
    8-turn conversation: the same tokens as without the cache, and the hits that the layout
    allows (a recurrent layer's state exists only at block ends)."""
    path = family_dir(family)
    system = random_ids(45, 1)
    prompts = [system + random_ids(k, 10 + k) for k in (3, 11, 20)]
    inside = system[:29] + random_ids(9, 3)  # diverges 5 tokens into the fourth block
    conversation, turns = random_ids(30, 4), []
    with LLM(path, prefix_cache=False) as off:
        expected = _tokens(_run(off, prompts))
        expected_inside = _tokens(_run(off, [inside]))[0]
        history = list(conversation)
        for turn in range(8):
            answer = _run(off, [history], n=6)[0].token_ids
            turns.append((list(history), answer))
            history = history + answer + random_ids(7, 100 + turn)
    with LLM(path, cache_block_size=BLOCK) as llm:
        first = _run(llm, prompts[:1])[0]
        assert first.usage.cached_tokens == 0
        rest = _run(llm, prompts[1:])
        assert [first.token_ids] + _tokens(rest) == expected
        for r in rest:
            # The system prompt: 45 tokens (5 whole blocks and 5 of a sixth) where a hit may
            # end inside a block, its last whole block otherwise.
            assert r.usage.cached_tokens == (40 if _has_state(llm) else 45)
        again = _run(llm, prompts)
        assert _tokens(again) == expected
        assert all(r.usage.computed_prompt_tokens == 1 for r in again)  # only the last token

        r = _run(llm, [inside])[0]
        assert r.token_ids == expected_inside
        assert r.usage.cached_tokens == (24 if _has_state(llm) else 29)

        for turn, (history, answer) in enumerate(turns):
            got = _run(llm, [history], n=6)[0]
            assert got.token_ids == answer, f"turn {turn}"
            if turn:
                # The previous turn's prompt and answer are cached: only the 7 new tokens and
                # the last prompt token are computed.
                assert got.usage.computed_prompt_tokens <= 7 + 1, f"turn {turn}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("family", FAMILIES)
def test_preemption_and_pressure_on_both_tiers(family, family_dir, tmp_path):
    """KV capacity that forces preemptions, a hot tier of a few blocks and a cold tier that GC
    keeps small: hits from both tiers and recomputation, and outputs never change."""
    from cache import gc

    path = family_dir(family)
    system = random_ids(40, 12)
    prompts = [system + random_ids(6 + 3 * i, 40 + i) for i in range(5)]
    with LLM(path, prefix_cache=False) as off:
        expected = _tokens(_run(off, prompts, n=14))
    root = tmp_path / "ssd"
    with LLM(
        path,
        cache_block_size=BLOCK,
        max_kv_tokens=120,
        max_concurrent_requests=5,
        share_inflight_prefixes=False,
        paged_ssd_cache_dir=str(root),
    ) as llm:
        cache = llm.engine.prefix_cache
        block_bytes = max(b.nbytes for b in cache.hot.blocks()) if len(cache.hot) else 0
        cold_hits = 0
        for round_ in range(3):
            assert _tokens(_run(llm, prompts, n=14)) == expected, f"round {round_} (batched)"
            if round_ == 0:
                block_bytes = max(b.nbytes for b in cache.hot.blocks())
                llm.engine.call(lambda e: e.prefix_cache.hot.set_capacity(3 * block_bytes))
            for prompt, tokens in zip(prompts, expected):
                r = _run(llm, [prompt], n=14)[0]
                assert r.token_ids == tokens, f"round {round_}"
                cold_hits += r.usage.cold_cached_tokens
            llm.engine.call(lambda e: e.prefix_cache.cold.flush())
            result = gc.collect(root, max_bytes=10 * block_bytes, ttl_seconds=None)
            assert result.bytes <= 10 * block_bytes
        assert llm.engine.scheduler.num_preemptions > 0
        assert cache.hot.stats.evictions > 0
        assert cold_hits > 0


_CHILD = """
import json, sys
import inference
from inference.engine import LLM, SamplingParams
path, root, prompts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with LLM(path, cache_block_size=8, paged_ssd_cache_dir=root) as llm:
    out = llm.generate(prompts, SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))
print(json.dumps([[r.token_ids, r.usage.cold_cached_tokens, r.usage.hot_cached_tokens] for r in out]))
"""


def _child(path, root, prompts):
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(root), json.dumps(prompts)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_restart_in_a_new_process_is_a_cold_hit(family, family_dir, tmp_path):
    path = family_dir(family)
    prompts = [random_ids(37, 5), random_ids(37, 5)[:30] + random_ids(8, 6)]
    with LLM(path, prefix_cache=False) as off:
        expected = _tokens(_run(off, prompts))
    root = tmp_path / "ssd"
    first = _child(path, root, prompts[:1])
    assert first[0][0] == expected[0]
    second = _child(path, root, prompts)
    assert [tokens for tokens, _, _ in second] == expected
    assert second[0][1] == 36  # all but the last prompt token, from the SSD tier
    # The shared 30 tokens: read from the SSD tier by the first (hot by then) or by itself.
    assert second[1][1] + second[1][2] >= 24


def _spy(cache):
    """Record, as numpy copies, every snapshot the engine hands to ``cache.store``."""
    recorded = []
    store = cache.store

    def recording_store(token_ids, snapshots, *args, **kwargs):
        for s in snapshots:
            recorded.append(
                (
                    s.end,
                    [
                        None
                        if layer is None
                        else tuple(np.array(a) if isinstance(a, mx.array) else a for a in layer)
                        for layer in s.layers
                    ],
                )
            )
        return store(token_ids, snapshots, *args, **kwargs)

    cache.store = recording_store
    return recorded


def _expected_layer(recorded, spec, i, end):
    """What layer ``i`` of a hit of ``end`` tokens must hold, from the recorded snapshots: the
    state taken at ``end``, or each token's keys and values from a snapshot that held them
    (the KV of a token is computed once; every later copy of it is the same)."""
    if spec.kind == "state":
        return next(layer[i] for e, layer in recorded if e == end and layer[i] is not None)
    keep = end if spec.kind == "full" else min(end, spec.window)
    keys, values = [], []
    for t in range(end - keep, end):
        k, v, first = next(layer[i] for e, layer in recorded if layer[i] is not None and layer[i][2] <= t < e)
        keys.append(k[..., t - first : t - first + 1, :])
        values.append(v[..., t - first : t - first + 1, :])
    return np.concatenate(keys, axis=2), np.concatenate(values, axis=2)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("family", FAMILIES)
def test_restored_caches_are_bit_identical(family, family_dir, tmp_path):
    """KV and recurrent state restored from the hot tier, and from the SSD tier by another
    engine, equal what the engine stored, array for array (not only in the tokens they give)."""
    path = family_dir(family)
    prompt = random_ids(44, 7)
    root = tmp_path / "ssd"
    with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root)) as llm:
        recorded = llm.engine.call(lambda e: _spy(e.prefix_cache))
        _run(llm, [prompt], n=9)
        layout = llm.engine.loaded.cache_layout

        def look(e):
            hit = e.prefix_cache.lookup(prompt + [1], max_tokens=len(prompt) + 8)
            layers = [tuple(np.array(a) for a in layer) for layer in hit.layers]
            e.prefix_cache.release(hit)
            return hit.num_tokens, hit.hot_tokens, layers

        hot = llm.engine.call(look)
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
    with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root)) as llm:
        cold = llm.engine.call(look)
    assert hot[1] == hot[0] and cold[1] == 0  # all hot, then all from the SSD tier
    for end, _, layers in (hot, cold):
        # The whole prompt, recurrent layers too: the prefill computes the prompt's last token
        # (the first output token is sampled from its logits) and takes the state there.
        assert end == 44
        for i, spec in enumerate(layout.layers):
            expected = _expected_layer(recorded, spec, i, end)
            assert len(layers[i]) == len(expected)
            for got, want in zip(layers[i], expected):
                assert got.dtype == want.dtype and got.shape == want.shape, (i, spec)
                assert np.array_equal(got, want), f"layer {i} ({spec.kind}) differs"


@pytest.mark.django_db(transaction=True)
def test_a_changed_layout_never_hits(family_dir, tmp_path):
    """Two folders with the same weights and tokenizer whose only difference is the sliding
    window: the second finds nothing of the first's blocks on the SSD tier."""
    src = family_dir("gemma3_text")
    other = tmp_path / "wider"
    shutil.copytree(src, other)
    config = json.loads((other / "config.json").read_text())
    config["sliding_window"] = config["sliding_window"] * 2
    (other / "config.json").write_text(json.dumps(config))
    prompt = random_ids(40, 8)
    root = tmp_path / "ssd"
    for path, expect_cached in ((src, 0), (src, 39), (other, 0)):
        with LLM(path, cache_block_size=BLOCK, paged_ssd_cache_dir=str(root)) as llm:
            assert _run(llm, [prompt])[0].usage.cached_tokens == expect_cached
