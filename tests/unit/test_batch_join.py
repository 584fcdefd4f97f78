"""Rows join a decode batch into the spare rows that rows leaving left (inference.engine.batch_join):
written into the same buffers, right-aligned to the batch's write index, and the batch then
computes what mlx-lm's ``extend`` (a copy of the whole batch) leaves it computing, through decode
steps, more leaves and joins, and the buffer's growth. Rows that do not fit (longer than the
batch's width, more than its spare rows, 8-bit KV) join through ``extend`` as before, in the same
order. On the test factory's llama."""

import numpy as np

from inference.engine import batch_join, cache_io
from inference.engine.batch_leave import Spare, leave, leave_order
from tests.unit.test_batch_leave import (  # noqa: F401  (loaded, float_kv: fixtures)
    PROMPTS,
    REMOVE,
    batch,
    filtered,
    float_kv,
    loaded,
    prefilled,
    ptr,
    rows_of,
    same_rows,
    step,
    verified,
)


def joined(cache, layers) -> set:
    """Join as the decode batch does (in place where it fits, else one merge and an extend);
    whether each layer joined in place."""
    kinds = set()
    for c, layer in zip(cache, layers):
        in_place = batch_join.join(c, layer)
        if not in_place:
            c.extend(cache_io.merge_rows(layer))
        kinds.add(in_place)
    return kinds


def extended(cache, layers) -> None:
    """The reference: mlx-lm's merge and extend."""
    for c, layer in zip(cache, layers):
        c.extend(type(layer[0]).merge(layer))


def test_rows_join_spare_rows_and_decode_as_after_an_extend(loaded):
    ours, theirs = batch(loaded, PROMPTS), batch(loaded, PROMPTS)
    tokens = [[60 + r] for r in range(len(PROMPTS))]
    np.testing.assert_array_equal(step(loaded, ours, tokens), step(loaded, theirs, tokens))
    order = leave_order(len(PROMPTS), [1, 3])
    leave(ours, order)
    filtered(theirs, order)
    newcomers = [[90, 91, 92, 93, 94], [95, 96]]  # no longer than the batch's 8 positions
    in_place = joined(ours, prefilled(loaded, newcomers))
    extended(theirs, prefilled(loaded, newcomers))
    assert in_place == ({True} if loaded.kv_quant is None else {False})  # 8-bit KV: extended
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)
    for n in range(3):
        tokens = [[100 + n + r] for r in range(len(PROMPTS))]
        np.testing.assert_allclose(step(loaded, ours, tokens), step(loaded, theirs, tokens), atol=1e-5)
    # a row leaves and another joins again, then one longer than the batch: extended
    order = leave_order(len(PROMPTS), [0])
    leave(ours, order)
    filtered(theirs, order)
    assert joined(ours, prefilled(loaded, [[110, 111, 112]])) == in_place
    extended(theirs, prefilled(loaded, [[110, 111, 112]]))
    longer = [list(range(120, 140))]
    assert joined(ours, prefilled(loaded, longer)) == {False}
    extended(theirs, prefilled(loaded, longer))
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)
    for n in range(2):
        tokens = [[150 + n + r] for r in range(len(PROMPTS) + 1)]
        np.testing.assert_allclose(step(loaded, ours, tokens), step(loaded, theirs, tokens), atol=1e-5)


def test_a_row_joins_without_a_copy_of_the_others(float_kv):
    """The joining row goes into the buffers the batch already had, and the steps after it
    write into them too; the positions before it are its left padding."""
    cache = batch(float_kv, PROMPTS)
    step(float_kv, cache, [[60 + r] for r in range(len(PROMPTS))])
    leave(cache, leave_order(len(PROMPTS), [2]))
    where = [(ptr(c.spare_buffers()[0]), ptr(c.spare_buffers()[1])) for c in cache]
    assert joined(cache, prefilled(float_kv, [[90, 91, 92]])) == {True}
    for n in range(3):
        step(float_kv, cache, [[70 + n + r] for r in range(len(PROMPTS))])
    for c, (keys, values) in zip(cache, where):
        assert isinstance(c, Spare) and c.keys.shape[0] == len(PROMPTS)
        assert (ptr(c.spare_buffers()[0]), ptr(c.spare_buffers()[1])) == (keys, values)
        assert c.offset.tolist()[-1] == 3 + 3 and c.left_padding.tolist()[-1] == c._idx - 6


def test_rows_that_do_not_fit_join_through_extend(float_kv):
    """More joining rows than spare ones, a batch no row left (no spare rows), a row longer than
    the batch's width: nothing is written, and ``extend`` takes them."""
    cache = batch(float_kv, PROMPTS)
    assert not batch_join.join(cache[0], prefilled(float_kv, [[90, 91]])[0])  # nothing left: no spare rows
    leave(cache, leave_order(len(PROMPTS), [1]))
    two = prefilled(float_kv, [[90, 91], [92, 93]])
    before = [(c.keys.shape, c.offset.tolist()) for c in cache]
    assert not any(batch_join.join(c, layer) for c, layer in zip(cache, two))  # one spare row
    assert not any(
        batch_join.join(c, layer) for c, layer in zip(cache, prefilled(float_kv, [list(range(20))]))
    )
    assert [(c.keys.shape, c.offset.tolist()) for c in cache] == before
    assert all(isinstance(c, Spare) and c.spare_buffers() is not None for c in cache)


def test_the_buffer_grows_after_a_join(float_kv):
    """A joined batch whose next steps pass its buffer's length grows as mlx-lm grows it: the
    rows, the joined one with them, computed as after an extend."""
    ours, theirs = batch(float_kv, PROMPTS, room=False), batch(float_kv, PROMPTS, room=False)
    step(float_kv, ours, [[60 + r] for r in range(len(PROMPTS))])
    step(float_kv, theirs, [[60 + r] for r in range(len(PROMPTS))])
    order = leave_order(len(PROMPTS), [4])
    leave(ours, order)
    filtered(theirs, order)
    assert joined(ours, prefilled(float_kv, [[90, 91]])) == {True}
    extended(theirs, prefilled(float_kv, [[90, 91]]))
    width = ours[0].spare_buffers()[0].shape[2]
    for n in range(width - ours[0]._idx + 2):  # past the buffer's end
        tokens = [[70 + n + r] for r in range(len(PROMPTS))]
        np.testing.assert_allclose(step(float_kv, ours, tokens), step(float_kv, theirs, tokens), atol=1e-5)
    assert all(c.spare_buffers() is None for c in ours)  # grown: plain again
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)


def test_rows_join_a_batch_with_holes(float_kv):
    """A batch whose rows hold a rollback's holes (masked rejected positions): the joining row
    has none, the holes stay masked, and the batch computes as the rolled one extended."""
    ours, theirs = verified(float_kv)
    order = leave_order(len(PROMPTS), [2])
    leave(ours, order)
    filtered(theirs, order)
    assert ours[0].holes and isinstance(ours[0], Spare)
    newcomer = [[90, 91, 92, 93]]
    assert joined(ours, prefilled(float_kv, newcomer)) == {True}
    extended(theirs, prefilled(float_kv, newcomer))
    assert ours[0].holes == [REMOVE[i] - min(REMOVE) for i in order] + [0]
    same_rows(rows_of(ours), rows_of(theirs), atol=1e-5)
    for n in range(2):
        tokens = [[120 + n + r] for r in range(len(PROMPTS))]
        np.testing.assert_allclose(step(float_kv, ours, tokens), step(float_kv, theirs, tokens), atol=1e-4)
