"""Prompts of token ids for the engine tests on the testkit's tiny models, and requests made of them."""

import numpy as np


def random_ids(n, seed):
    """``n`` token ids from 10 to 899, the same ones for the same ``seed``."""
    return np.random.default_rng(seed).integers(10, 900, size=n).tolist()


def looping_rows(n):
    """``n`` greedy requests whose prompt repeats 1..6 three times: prompt lookup drafts for them
    at once (the speculation policy's tests)."""
    from inference.engine import SamplingParams
    from inference.engine.request import Request

    params = SamplingParams(max_tokens=100, temperature=0, ignore_eos=True)
    return [Request(f"r{i}", [1, 2, 3, 4, 5, 6] * 3, params, None, frozenset(), None, 0) for i in range(n)]
