"""Requests that arrive together with a shared prompt prefix compute it once: the later ones
wait for the first one's prefill and reuse its KV from the block cache."""

import threading

import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.request import RequestStatus
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)
BLOCK = 8


def _distinct_suffixes(lengths, seed):
    """Suffixes that all start with a different token, so the shared part ends where it should."""
    suffixes = [random_ids(k, seed + i) for i, k in enumerate(lengths)]
    for i, s in enumerate(suffixes):
        s[0] = 900 + i
    return suffixes


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


@pytest.fixture(scope="module")
def uncached(path):
    with LLM(path, prefix_cache=False) as llm:
        yield llm


def _run(llm, prompts, n=10):
    return llm.generate(prompts, SamplingParams(max_tokens=n, **GREEDY))


def _alone(llm, prompts, n=10):
    return [_run(llm, [p], n)[0].token_ids for p in prompts]


def _computed(results):
    return sum(r.usage.computed_prompt_tokens for r in results)


@pytest.mark.parametrize("chunking", [{}, dict(prefill_chunk_size=16, step_token_budget=32)])
def test_identical_prompts_compute_the_prompt_once(path, uncached, chunking):
    # 37 tokens: in chunks of 16 the last chunk is 4 tokens, less than a block: followers still
    # wait for it, since it is the owner's last.
    prompt = random_ids(37, 1)
    expected = _alone(uncached, [prompt])[0]
    with LLM(path, cache_block_size=BLOCK, **chunking) as llm:
        results = _run(llm, [prompt] * 4)
    assert [r.token_ids for r in results] == [expected] * 4
    assert results[0].usage.cached_tokens == 0
    for r in results[1:]:
        # Everything but the last token, the partial last block included, came from the first.
        assert r.usage.hot_cached_tokens == 36 and r.usage.computed_prompt_tokens == 1
    assert _computed(results) == 37 + 3


def test_switched_off_each_request_computes_its_own(path):
    prompt = random_ids(37, 1)
    for settings in (dict(share_inflight_prefixes=False), dict(prefix_cache=False)):
        with LLM(path, cache_block_size=BLOCK, **settings) as llm:
            results = _run(llm, [prompt] * 4)
        assert _computed(results) == 4 * 37, settings
        assert len({tuple(r.token_ids) for r in results}) == 1


def test_a_shared_system_prompt_is_computed_once(path, uncached):
    system = random_ids(40, 2)
    prompts = [system + s for s in _distinct_suffixes([5, 11, 3, 17, 9], 20)]
    expected = _alone(uncached, prompts)
    with LLM(path, cache_block_size=BLOCK) as llm:
        results = _run(llm, prompts)
    assert [r.token_ids for r in results] == expected
    assert results[0].usage.cached_tokens == 0
    assert all(r.usage.cached_tokens == 40 for r in results[1:])
    assert _computed(results) == sum(len(p) for p in prompts) - 4 * 40


@pytest.mark.parametrize("chunking", [{}, dict(prefill_chunk_size=8, step_token_budget=64)])
def test_less_than_a_block_in_common_does_not_wait(path, chunking):
    """Seven shared tokens (a chat template's opening, say), with an owner whose prefill ends
    in this step or is still many chunks from its end: both start at once."""
    system = random_ids(7, 3)
    prompts = [system + s for s in _distinct_suffixes([60, 30], 30)]
    with LLM(path, cache_block_size=BLOCK, **chunking) as llm:
        results = _run(llm, prompts)
    assert [r.usage.cached_tokens for r in results] == [0, 0]


@pytest.mark.parametrize(
    "chunking",
    [
        dict(prefill_chunk_size=8, step_token_budget=8, max_concurrent_requests=4),
        dict(prefill_chunk_size=5, step_token_budget=6, max_concurrent_requests=6),
    ],
)
def test_chunked_prefill_shares_and_matches(path, uncached, chunking):
    system = random_ids(48, 4)
    prompts = [system + s for s in _distinct_suffixes([20, 4, 13, 9], 40)] + [random_ids(30, 5)]
    expected = _alone(uncached, prompts)
    with LLM(path, cache_block_size=BLOCK, **chunking) as llm:
        results = _run(llm, prompts)
    assert [r.token_ids for r in results] == expected
    assert all(r.usage.cached_tokens == 48 for r in results[1:4])
    assert results[4].usage.cached_tokens == 0


def test_followers_start_once_the_shared_blocks_are_stored(path, uncached):
    """The first prompt is long; the second shares only its first 40 tokens. The first one's
    whole blocks are stored after each chunk, so the second starts (and streams its first
    token) while the first is still prefilling, and still reuses the shared part."""
    system = random_ids(40, 6)
    long_prompt, short_prompt = (system + s for s in _distinct_suffixes([200, 2], 60))
    expected = _alone(uncached, [long_prompt, short_prompt])
    with LLM(
        path, cache_block_size=BLOCK, prefill_chunk_size=8, step_token_budget=16, max_concurrent_requests=4
    ) as llm:
        order, done = [], threading.Semaphore(0)

        def collect(i, event):
            order.append((i, event))
            if event.finished:
                done.release()

        for i, p in enumerate([long_prompt, short_prompt]):
            llm.engine.submit(
                p, SamplingParams(max_tokens=10, **GREEDY), callback=lambda e, i=i: collect(i, e)
            )
        assert done.acquire(timeout=120) and done.acquire(timeout=120)
    firsts = [i for i, e in order if e.token_ids]
    assert firsts[0] == 1, "the short request should stream before the long one's prefill ends"
    for i in (0, 1):
        events = [e for j, e in order if j == i]
        assert [t for e in events for t in e.token_ids] == expected[i]
        assert events[-1].usage.cached_tokens == (0, 40)[i]


def _until(llm, condition, action):
    """Poll between engine steps until condition(engine) holds, then run action(engine) in that
    same pause; returns what condition saw."""
    for _ in range(100000):
        seen = llm.engine.call(lambda e: condition(e) and (action(e) or True), timeout=60)
        if seen:
            return seen
    raise AssertionError("the condition never held")


def test_followers_go_on_when_the_owner_is_aborted(path, uncached):
    system = random_ids(200, 7)
    owner_prompt, *follower_prompts = (system + s for s in _distinct_suffixes([10, 6, 9], 70))
    expected = _alone(uncached, follower_prompts)
    with LLM(
        path, cache_block_size=BLOCK, prefill_chunk_size=4, step_token_budget=4, max_concurrent_requests=4
    ) as llm:
        params = SamplingParams(max_tokens=10, **GREEDY)
        owner = llm.engine.submit(owner_prompt, params)
        followers = [llm.engine.submit(p, params) for p in follower_prompts]

        def waiting_on_owner(e):
            o = e.scheduler.find(owner.request_id)
            assert o is not None and o.status is not RequestStatus.DECODING, "the owner finished first"
            fs = [e.scheduler.find(f.request_id) for f in followers]
            return (
                o.status is RequestStatus.PREFILLING
                and o.num_computed >= 3 * BLOCK
                and all(f.status is RequestStatus.WAITING for f in fs)
            )

        _until(llm, waiting_on_owner, lambda e: e.abort(owner.request_id))
        assert list(owner)[-1].finish_reason == "abort"
        results = [list(f) for f in followers]
    for events, tokens in zip(results, expected):
        assert [t for e in events for t in e.token_ids] == tokens
    # The whole blocks the owner had stored before it was aborted are reused; the first
    # follower computed the rest of the shared prompt, and the others reused that.
    assert 3 * BLOCK <= results[0][-1].usage.cached_tokens < 200
    assert results[1][-1].usage.cached_tokens == 200


def test_followers_go_on_when_the_owner_is_preempted(path, uncached):
    """A long decoding request grows until the KV capacity forces out the newest running one:
    the owner, in the middle of its prefill, with followers waiting for it."""
    decoder = random_ids(100, 8)
    system = random_ids(48, 9)
    owner_prompt, *follower_prompts = (system + s for s in _distinct_suffixes([12, 6, 9], 80))
    prompts = [decoder, owner_prompt, *follower_prompts]
    expected = _alone(uncached, prompts, n=12)
    with LLM(
        path,
        cache_block_size=BLOCK,
        prefill_chunk_size=8,
        step_token_budget=8,
        max_concurrent_requests=4,
        max_kv_tokens=2 * 101 + 6,
    ) as llm:
        results = _run(llm, prompts, n=12)
        assert llm.engine.scheduler.num_preemptions > 0
    assert [r.token_ids for r in results] == expected
    assert all(r.usage.cached_tokens == 48 for r in results[2:])
