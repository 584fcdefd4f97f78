"""The full-attention rollback of a verify pass leaves rejected positions as masked holes
(inference.engine.speculative.holes) instead of rolling the rows that kept fewer tokens: no key
or value is moved, and what the batch computes afterwards, and what a row taken out of it holds,
equal the rolled batch's, through decode steps, a row leaving, a row joining and compaction. On
the test factory's llama, float KV and 8-bit KV."""

import mlx.core as mx
import numpy as np
import pytest

from inference.engine.kv_quant import KVQuant
from inference.engine.model_loader import load_model
from inference.engine.speculative import holes as holes_module
from inference.engine.speculative.rollback import Rollback, roll_back
from tests.unit.test_batch_leave import prefilled

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22], [30, 31, 32, 33, 34]]
WIDTH = 5
REMOVE = [1, 4, 2]  # rows keep 4, 1 and 3 of the pass's 5 positions


@pytest.fixture(scope="module", params=[None, 8], ids=["float-kv", "kv8"])
def loaded(model_dir, request):
    quant = KVQuant(bits=request.param, group_size=32) if request.param else None
    return load_model(model_dir(arch="llama", preset="tiny", head_dim=32), kv_quant=quant)


def batch(loaded, prompts):
    """The rows prefilled alone, merged as mlx-lm merges them (as long as the longest row)."""
    return [type(layer[0]).merge(layer) for layer in prefilled(loaded, prompts)]


def verified(loaded, holes: bool):
    """A batch after a verify pass of WIDTH positions, rolled back by REMOVE."""
    cache = batch(loaded, PROMPTS)
    tokens = [[40 + r + i for i in range(WIDTH)] for r in range(len(PROMPTS))]
    mx.eval(loaded.model(mx.array(tokens, dtype=mx.uint32), cache=cache))
    roll_back(cache, REMOVE, holes=holes)
    return cache


def step(loaded, cache, tokens):
    logits = loaded.model(mx.array(tokens, dtype=mx.uint32), cache=cache)
    return np.array(logits[:, -1].astype(mx.float32))


def rows_of(cache):
    """Every row's keys and values as one sequence (``extract``), per layer."""
    return [
        [np.array(a.astype(mx.float32)) for a in _arrays(c.extract(i))]
        for c in cache
        for i in range(len(c.offset))
    ]


def _arrays(single):
    return [*single.keys, *single.values] if isinstance(single.keys, tuple) else [single.keys, single.values]


def same(a, b, atol=0.0):
    """Equal rows: exactly, or within ``atol`` where a pass ran over holes (its attention sums the
    same scores with masked zeros where the rolled batch has left padding, so the layers after
    the first can differ in the last bits)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for p, q in zip(x, y):
            if atol:
                np.testing.assert_allclose(p, q, rtol=0, atol=atol)
            else:
                np.testing.assert_array_equal(p, q)


def test_rows_that_keep_fewer_are_not_moved(loaded):
    """A rollback with holes moves no key or value: every layer keeps its arrays (the roll it
    replaces gathered every row of every layer, several plain steps of a large batch)."""
    cache = batch(loaded, PROMPTS)
    tokens = [[40 + i for i in range(WIDTH)]] * len(PROMPTS)
    mx.eval(loaded.model(mx.array(tokens, dtype=mx.uint32), cache=cache))
    before = [(c.keys, c.values, c._idx) for c in cache]
    roll_back(cache, REMOVE, holes=True)
    for c, (keys, values, idx) in zip(cache, before):
        assert c.keys is keys and c.values is values
        assert c._idx == idx - min(REMOVE)  # the common part trimmed
        assert c.holes == [r - min(REMOVE) for r in REMOVE]


def test_the_engines_rollback_of_full_attention_leaves_holes(loaded):
    cache = batch(loaded, PROMPTS)
    rollback = Rollback(cache)
    tokens = [[40 + i for i in range(WIDTH)]] * len(PROMPTS)
    mx.eval(loaded.model(mx.array(tokens, dtype=mx.uint32), cache=cache))
    keys = [c.keys for c in cache]
    rollback.apply(REMOVE, tokens, lambda t: loaded.model(t, cache=cache))
    assert all(c.keys is k for c, k in zip(cache, keys))
    assert all(c.holes for c in cache)


def test_a_holed_batch_computes_what_a_rolled_one_does(loaded):
    holed, rolled = verified(loaded, True), verified(loaded, False)
    same(rows_of(holed), rows_of(rolled))
    for n in range(3):
        tokens = [[60 + n + r] for r in range(len(PROMPTS))]
        np.testing.assert_allclose(step(loaded, holed, tokens), step(loaded, rolled, tokens), atol=1e-4)
    # a second verify pass on top of the holes, rows dropping different counts again
    tokens = [[70 + r + i for i in range(WIDTH)] for r in range(len(PROMPTS))]
    np.testing.assert_allclose(step(loaded, holed, tokens), step(loaded, rolled, tokens), atol=1e-4)
    roll_back(holed, [3, 0, 2], holes=True)
    roll_back(rolled, [3, 0, 2])
    same(rows_of(holed), rows_of(rolled), atol=1e-5)
    tokens = [[80 + r] for r in range(len(PROMPTS))]
    np.testing.assert_allclose(step(loaded, holed, tokens), step(loaded, rolled, tokens), atol=1e-4)


def test_rows_leave_and_join_a_holed_batch(loaded):
    holed, rolled = verified(loaded, True), verified(loaded, False)
    for c in holed + rolled:
        c.filter([1, 2])  # the longest row leaves: the others' common padding is dropped
    assert holed[0].holes == [REMOVE[1] - min(REMOVE), REMOVE[2] - min(REMOVE)]
    joining = batch(loaded, [[90, 91, 92, 93, 94, 95, 96, 97, 98, 99]])
    for h, r, j in zip(holed, rolled, joining):
        h.extend(j)
        r.extend(type(j).merge([j.extract(0)]))
    same(rows_of(holed), rows_of(rolled))
    tokens = [[100], [101], [102]]
    np.testing.assert_allclose(step(loaded, holed, tokens), step(loaded, rolled, tokens), atol=1e-4)


def test_holes_are_compacted_into_the_left_padding(loaded, monkeypatch):
    monkeypatch.setattr(holes_module, "COMPACT_LEAST", 1)
    holed, rolled = verified(loaded, True), verified(loaded, False)
    assert all(c.valid is None for c in holed)  # a row had more than one hole: compacted
    for h, r in zip(holed, rolled):
        assert h.left_padding.tolist() == r.left_padding.tolist()
        assert h.offset.tolist() == r.offset.tolist()
    same(rows_of(holed), rows_of(rolled))
    tokens = [[60 + r] for r in range(len(PROMPTS))]
    np.testing.assert_allclose(step(loaded, holed, tokens), step(loaded, rolled, tokens), atol=1e-4)
