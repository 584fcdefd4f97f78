"""Cache salts in the engine: requests under different salts share no cached block, in the hot
tier or the cold one, whole blocks or the partial last one; the same salt shares as before, and
the output never changes."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import numpy as np
import pytest

from cache.prefix_cache import PrefixCache
from inference.engine import LLM, EngineConfig, SamplingParams
from inference.engine.request import Request
from inference.engine.scheduler import Scheduler

GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
BLOCK = 8
PROMPT = np.random.default_rng(3).integers(10, 900, size=45).tolist()  # 5 blocks and a partial one


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


def _cached(llm, prompt, salt):
    r = llm.generate([prompt], GREEDY, cache_salt=salt)[0]
    if llm.engine.prefix_cache.cold is not None:  # its writes are on disk before the next request
        llm.engine.call(lambda e: e.prefix_cache.cold.flush())
    return r.usage, r.token_ids


def _check_isolation(llm):
    first, tokens = _cached(llm, PROMPT, "a")
    assert first.cached_tokens == 0
    for salt in ("b", None):  # another salt, and no salt, see none of salt a's blocks
        usage, again = _cached(llm, PROMPT, salt)
        assert usage.cached_tokens == 0, salt
        assert again == tokens  # greedy output is the same under any salt
    usage, again = _cached(llm, PROMPT, "a")
    assert usage.cached_tokens == 44 and again == tokens  # all but the last token
    # A prompt that leaves the stored one inside its second block reuses the common part, the
    # partial block included, under its own salt only.
    other = PROMPT[:13] + [901, 902, 903]
    assert _cached(llm, other, "b")[0].cached_tokens == 13
    assert _cached(llm, other, "c")[0].cached_tokens == 0
    return first, usage


def test_salts_isolate_the_hot_tier(path):
    with LLM(path, cache_block_size=BLOCK) as llm:
        _, hit = _check_isolation(llm)
    assert hit.hot_cached_tokens == 44


@pytest.mark.django_db(transaction=True)
def test_salts_isolate_the_cold_tier(path, tmp_path):
    """No RAM tier: every hit is read from block files, whose chains start at the salted root."""
    with LLM(path, cache_block_size=BLOCK, hot_cache_max_size=0, paged_ssd_cache_dir=str(tmp_path)) as llm:
        _, hit = _check_isolation(llm)
    assert hit.cold_cached_tokens == 44


class _UnsaltedHoldsAll(PrefixCache):
    """A cache whose unsalted namespace holds every prompt, and whose salted ones hold nothing."""

    wants_kv = True

    def peek(self, token_ids, max_tokens, salt=None):
        return max_tokens if salt is None else 0


def test_a_prefill_of_another_salt_is_not_waited_for():
    """A request waits for an older prefill of its own salt that will store what its salt's cache
    lacks; never for another salt's (whose blocks are not its to reuse, and whose wait would show
    in the time to first token)."""
    scheduler = Scheduler(EngineConfig(cache_block_size=BLOCK), 10**6, _UnsaltedHoldsAll())

    def request(salt):
        return Request("r", PROMPT, GREEDY, None, frozenset(), print, 0, cache_salt=salt)

    owner = request("a")
    owner.num_computed = 16
    scheduler.prefilling.append(owner)
    assert scheduler.waits_for_shared_prefill(request("a"))  # salt a's cache lacks it
    assert not scheduler.waits_for_shared_prefill(request("b"))
    assert not scheduler.waits_for_shared_prefill(request(None))


def test_a_salt_that_is_no_string_is_refused_before_the_engine_thread(path):
    with LLM(path, cache_block_size=BLOCK) as llm:
        with pytest.raises(ValueError, match="cache_salt"):
            llm.generate([PROMPT], GREEDY, cache_salt=b"bytes")
        assert llm.generate([PROMPT], GREEDY, cache_salt="\ud800")[0].finish_reason == "length"
