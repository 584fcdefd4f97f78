"""Prompts of token ids for the engine tests on the testkit's tiny models."""

import numpy as np


def random_ids(n, seed):
    """``n`` token ids from 10 to 899, the same ones for the same ``seed``."""
    return np.random.default_rng(seed).integers(10, 900, size=n).tolist()
