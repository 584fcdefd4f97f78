"""Rows leave a decode batch without a copy of the rows that stay (inference.engine.batch_leave):
the staying rows past the new count move into the leaving rows' slots, in place, and the batch
then computes what mlx-lm's ``filter`` (a gather of every staying row) leaves it computing,
through decode steps, more rows leaving, a row joining, the buffer growing, and holes of a
verify pass's rollback. On the test factory's llama, float KV and 8-bit KV (which is filtered
as before, in the same order)."""

import random

import mlx.core as mx
import numpy as np
import pytest

from inference.engine import batch_leave, cache_io
from inference.engine.batch_leave import Spare, leave, leave_order
from inference.engine.kv_quant import KVQuant
from inference.engine.model_loader import load_model
from inference.engine.speculative.rollback import TRIM, roll_back, rollback_kind

PROMPTS = [
    [5, 6, 7, 8, 9, 10, 11],
    [20, 21, 22, 23],
    [30, 31, 32, 33, 34],
    [40, 41, 42, 43, 44, 45],
    [50, 51, 52],
]


@pytest.fixture(scope="module", params=[None, 8], ids=["float-kv", "kv8"])
def loaded(model_dir, request):
    quant = KVQuant(bits=request.param, group_size=32) if request.param else None
    return load_model(model_dir(arch="llama", preset="tiny", head_dim=32), kv_quant=quant)


@pytest.fixture(scope="module")
def float_kv(model_dir):
    return load_model(model_dir(arch="llama", preset="tiny", head_dim=32))


def prefilled(loaded, prompts):
    """The rows prefilled alone: one list of caches per layer, one cache per row."""
    rows = []
    for prompt in prompts:
        cache = loaded.new_cache()
        mx.eval(loaded.model(mx.array([prompt], dtype=mx.uint32), cache=cache))
        rows.append(cache)
    return [list(layer) for layer in zip(*rows)]


def batch(loaded, prompts, room=True):
    """The rows prefilled alone and merged as the decode batch merges them (``room``: with free
    positions after the newest, as ``DecodeBatch`` does; else as long as the longest row)."""
    merge = cache_io.merge_rows if room else (lambda layer: type(layer[0]).merge(layer))
    return [merge(layer) for layer in prefilled(loaded, prompts)]


REMOVE = [1, 3, 0, 2, 3]  # positions each row of PROMPTS rejects of a verify pass of 4


def verified(loaded):
    """Two batches of PROMPTS after a verify pass of 4 positions, rolled back by REMOVE: ours
    with holes, theirs with a roll (the reference)."""
    ours, theirs = batch(loaded, PROMPTS), batch(loaded, PROMPTS)
    tokens = [[110 + r + i for i in range(4)] for r in range(len(PROMPTS))]
    for cache, holes in ((ours, True), (theirs, False)):
        mx.eval(loaded.model(mx.array(tokens, dtype=mx.uint32), cache=cache))
        roll_back(cache, REMOVE, holes=holes)
    return ours, theirs


def step(loaded, cache, tokens):
    logits = loaded.model(mx.array(tokens, dtype=mx.uint32), cache=cache)
    return np.array(logits[:, -1].astype(mx.float32))


def rows_of(cache):
    """Every row's keys and values as one sequence (``extract``), per layer."""
    out = []
    for c in cache:
        for i in range(len(c.offset)):
            single = c.extract(i)
            arrays = (
                [*single.keys, *single.values]
                if isinstance(single.keys, tuple)
                else [single.keys, single.values]
            )
            out.append([np.array(a.astype(mx.float32)) for a in arrays])
    return out


def same_rows(a, b, atol=0.0):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            assert p.shape == q.shape
            np.testing.assert_allclose(p, q, rtol=0, atol=atol)


def filtered(cache, order):
    """The reference: mlx-lm's filter (a gather of the rows kept, the common left padding cut)."""
    for c in cache:
        c.filter(order)


def ptr(a) -> int:
    """Where an array's data lies (evaluating it)."""
    return np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data


def test_leave_order_keeps_slots_and_fills_the_leaving_ones_from_the_end():
    rng = random.Random(0)
    assert leave_order(5, [1]) == [0, 4, 2, 3]
    assert leave_order(5, [4]) == [0, 1, 2, 3]
    assert leave_order(6, [0, 2, 5]) == [4, 1, 3]
    for _ in range(500):
        rows = rng.randint(2, 20)
        gone = rng.sample(range(rows), rng.randint(1, rows - 1))
        order = leave_order(rows, gone)
        n = rows - len(gone)
        assert sorted(order) == sorted(set(range(rows)) - set(gone))  # each staying row once
        for j, i in enumerate(order):
            assert i == j or (j in gone and i >= n)  # a row moves only from past the new count


def test_rows_leaving_in_place_decode_as_after_a_filter(loaded):
    ours, theirs = batch(loaded, PROMPTS), batch(loaded, PROMPTS)
    tokens = [[60 + r] for r in range(len(PROMPTS))]
    np.testing.assert_array_equal(step(loaded, ours, tokens), step(loaded, theirs, tokens))
    order = leave_order(len(PROMPTS), [1])
    leave(ours, order)
    filtered(theirs, order)
    same_rows(rows_of(ours), rows_of(theirs))
    for n in range(3):
        tokens = [[70 + n + r] for r in range(len(order))]
        np.testing.assert_allclose(step(loaded, ours, tokens), step(loaded, theirs, tokens), atol=1e-5)
    # two more leave at once, one of them a row that moved
    order = leave_order(len(order), [0, 1])
    leave(ours, order)
    filtered(theirs, order)
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)
    tokens = [[80 + r] for r in range(len(order))]
    np.testing.assert_allclose(step(loaded, ours, tokens), step(loaded, theirs, tokens), atol=1e-5)
    # a row joins
    joining = batch(loaded, [[90, 91, 92, 93, 94, 95, 96, 97, 98, 99]])
    for o, t, j in zip(ours, theirs, joining):
        o.extend(j)
        t.extend(type(j).merge([j.extract(0)]))
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)
    tokens = [[100 + r] for r in range(len(order) + 1)]
    np.testing.assert_allclose(step(loaded, ours, tokens), step(loaded, theirs, tokens), atol=1e-5)


def test_a_row_leaves_without_a_copy_of_the_others(float_kv):
    """The staying rows stay in the same buffers, through the leave and the steps after it."""
    cache = batch(float_kv, PROMPTS)
    step(float_kv, cache, [[60 + r] for r in range(len(PROMPTS))])
    where = [(ptr(c.keys), ptr(c.values)) for c in cache]
    leave(cache, leave_order(len(PROMPTS), [1]))
    for n in range(3):
        step(float_kv, cache, [[70 + n + r] for r in range(len(PROMPTS) - 1)])
    for c, (keys, values) in zip(cache, where):
        assert isinstance(c, Spare)
        assert c.keys.shape[0] == len(PROMPTS) - 1
        assert c.spare_buffers()[0].shape[0] == len(PROMPTS)  # the spare row is still there
        assert (ptr(c.spare_buffers()[0]), ptr(c.spare_buffers()[1])) == (keys, values)


def test_the_buffer_grows_from_the_rows_that_stay(float_kv):
    """A batch merged as long as its longest row grows on its next step: the grown cache holds
    the staying rows only, plain again, and computes as the filtered one does."""
    ours, theirs = batch(float_kv, PROMPTS, room=False), batch(float_kv, PROMPTS, room=False)
    order = leave_order(len(PROMPTS), [2])
    leave(ours, order)
    filtered(theirs, order)
    for n in range(2):
        tokens = [[70 + n + r] for r in range(len(order))]
        np.testing.assert_allclose(step(float_kv, ours, tokens), step(float_kv, theirs, tokens), atol=1e-5)
    assert all(c.spare_buffers() is None and c.keys.shape[0] == len(order) for c in ours)
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)


def test_holes_move_with_their_rows(float_kv):
    """Rows holding a rollback's holes (masked rejected positions) leave and move with them."""
    ours, theirs = verified(float_kv)
    assert ours[0].holes
    order = leave_order(len(PROMPTS), [0, 2])
    leave(ours, order)
    filtered(theirs, order)
    assert ours[0].holes == [REMOVE[i] - min(REMOVE) for i in order]
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)
    for n in range(2):
        tokens = [[120 + n + r] for r in range(len(order))]
        np.testing.assert_allclose(step(float_kv, ours, tokens), step(float_kv, theirs, tokens), atol=1e-4)


def test_a_copy_is_made_when_padding_or_spare_rows_would_dominate(float_kv, monkeypatch):
    # The longest row leaves rows three times shorter: their common left padding would be most
    # of the buffer, so the cache is filtered (and the padding cut) as before.
    prompts = [list(range(5, 35)), [40, 41, 42, 43, 44, 45, 46, 47, 48, 49], list(range(50, 60))]
    cache = batch(float_kv, prompts)
    leave(cache, leave_order(3, [0]))
    assert all(not isinstance(c, Spare) and c._idx == 10 for c in cache)
    # Half the rows leave: copied, and their memory given back.
    cache = batch(float_kv, PROMPTS[:4])
    leave(cache, leave_order(4, [1, 3]))
    assert all(not isinstance(c, Spare) for c in cache)
    # Below both limits: in place.
    monkeypatch.setattr(batch_leave, "SPARE_KEPT", 4)
    cache = batch(float_kv, PROMPTS[:4])
    leave(cache, leave_order(4, [1, 3]))
    assert all(isinstance(c, Spare) and c.spare_buffers()[0].shape[0] == 4 for c in cache)


def test_a_batch_that_rows_left_still_speculates(float_kv):
    """Its caches roll back as full attention does (a verify pass after a row left is allowed)."""
    cache = batch(float_kv, PROMPTS)
    leave(cache, leave_order(len(PROMPTS), [1]))
    assert all(isinstance(c, Spare) for c in cache)
    assert rollback_kind(cache) == TRIM
