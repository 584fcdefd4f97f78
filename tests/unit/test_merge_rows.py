"""``cache_io.merge_rows``: rows joining a decode batch merged with room after the newest
position, against mlx-lm's own ``BatchKVCache.merge`` on the same rows: the same keys, values,
offsets and padding through steps, a verify-sized write, a trim, an extend, a filter and an
extract; the room taken without growing the buffer; other caches merged as mlx-lm merges them."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import BatchKVCache, KVCache, RotatingKVCache

from inference.engine import cache_io

HEADS, DIM = 2, 4


def _row(length: int, seed: int) -> KVCache:
    c = KVCache()
    shape = (1, HEADS, length, DIM)
    c.update_and_fetch(
        mx.random.normal(shape, key=mx.random.key(seed)),
        mx.random.normal(shape, key=mx.random.key(seed + 50)),
    )
    return c


def _rows(lengths, seed=0):
    return [_row(n, seed + i) for i, n in enumerate(lengths)]


def _same(a: BatchKVCache, b: BatchKVCache) -> None:
    """The same content (the filled width, per row from its left padding), bookkeeping and mask."""
    assert a._idx == b._idx
    assert a.offset.tolist() == b.offset.tolist()
    assert a.left_padding.tolist() == b.left_padding.tolist()
    for row, pad in enumerate(a.left_padding.tolist()):
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            np.testing.assert_array_equal(
                np.array(x[row, :, pad : a._idx]), np.array(y[row, :, pad : b._idx])
            )
    np.testing.assert_array_equal(
        np.array(a.make_mask(3, return_array=True)), np.array(b.make_mask(3, return_array=True))
    )


def _write(caches, n, seed):
    shape = (len(caches[0].offset.tolist()), HEADS, n, DIM)
    k, v = (
        mx.random.normal(shape, key=mx.random.key(seed)),
        mx.random.normal(shape, key=mx.random.key(seed + 1)),
    )
    outs = [c.update_and_fetch(k, v) for c in caches]
    for x, y in zip(*outs):
        np.testing.assert_array_equal(np.array(x), np.array(y))


def test_rows_merged_with_room_behave_as_mlx_lm_merged_rows():
    lengths = [7, 3, 5]
    mine = cache_io.merge_rows(_rows(lengths), room=8)
    theirs = BatchKVCache.merge(_rows(lengths))
    assert type(mine) is BatchKVCache
    assert mine.keys.shape[2] == 7 + 8 and theirs.keys.shape[2] == 7
    _same(mine, theirs)
    buffer = mine.keys.shape[2]
    _write([mine, theirs], 1, 10)  # a decode step: into the room, no new buffer
    _write([mine, theirs], 5, 20)  # a verify pass of width 5
    assert mine.keys.shape[2] == buffer
    _same(mine, theirs)
    for c in (mine, theirs):
        c.trim(3)  # a rejected draft
    _same(mine, theirs)
    _write([mine, theirs], 6, 30)  # past the room: the buffer grows as mlx-lm grows it
    assert mine.keys.shape[2] > buffer
    _same(mine, theirs)
    for i in range(3):
        a, b = mine.extract(i), theirs.extract(i)
        np.testing.assert_array_equal(np.array(a.keys), np.array(b.keys))
        assert a.offset == b.offset


def test_a_batch_extended_with_rows_merged_with_room_and_filtered():
    mine = cache_io.merge_rows(_rows([6, 2]), room=4)
    theirs = BatchKVCache.merge(_rows([6, 2]))
    _write([mine, theirs], 1, 40)
    mine.extend(cache_io.merge_rows(_rows([9, 4], seed=5), room=4))
    theirs.extend(BatchKVCache.merge(_rows([9, 4], seed=5)))
    _same(mine, theirs)
    _write([mine, theirs], 2, 50)
    _same(mine, theirs)
    for c in (mine, theirs):
        c.filter(mx.array([1, 3]))
    _same(mine, theirs)
    _write([mine, theirs], 1, 60)
    _same(mine, theirs)


def test_other_caches_merge_as_mlx_lm_merges_them():
    rotating = []
    for seed in range(2):
        c = RotatingKVCache(max_size=4)
        c.update_and_fetch(mx.zeros((1, HEADS, 3 + seed, DIM)), mx.zeros((1, HEADS, 3 + seed, DIM)))
        rotating.append(c)
    assert type(cache_io.merge_rows(rotating)) is type(RotatingKVCache.merge(rotating))
    mixed = _rows([3, 2])
    mixed[1].keys = mixed[1].keys.astype(mx.float16)
    merged = cache_io.merge_rows(mixed)
    assert merged.keys.shape[2] == 3  # mlx-lm's merge: no room
    empty = [KVCache(), _row(2, 3)]
    assert cache_io.merge_rows(empty).keys.shape[2] == 2
