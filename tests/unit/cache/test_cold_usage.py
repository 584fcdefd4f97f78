"""cache/cold_usage.py: per-model usage of the cold tier and clearing it (what `omlx cache` runs)."""

import json

import pytest

from cache.cold_usage import clear, usage
from cache.models import CacheBlock

from tests.support.cache.cold_blocks import (
    FP,
    FP2,
    make_chain,
    path_of,
    row_keys,
    write_all,
)
from tests.support.cache.cold_blocks import tiers  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_usage_counts_files_and_rows_and_names_the_model(tiers, tmp_path):
    root = tmp_path / "cold"
    a = tiers(FP, root, model_info={"path": "/models/alpha"})
    b = tiers(FP2, root)
    # One writer at a time: the test database (in-memory SQLite) locks a table per writer.
    write_all(a, make_chain(FP, 3))
    write_all(b, make_chain(FP2, 2))
    info = json.loads((root / FP.hex / "model.json").read_text())
    assert info["path"] == "/models/alpha" and info["fingerprint"] == FP.hex
    got = {u.fingerprint: u for u in usage(root)}
    assert got[FP.hex].model_path == "/models/alpha" and got[FP2.hex].model_path is None
    assert (got[FP.hex].files, got[FP.hex].rows, got[FP.hex].tokens) == (3, 3, 12)
    assert (
        got[FP.hex].bytes
        == got[FP.hex].row_bytes
        == sum(path_of(a, k).stat().st_size for k in a.entries.keys())
    )
    assert got[FP.hex].last_used is not None
    assert (got[FP2.hex].files, got[FP2.hex].rows) == (2, 2)


def test_clear_removes_files_then_rows_stale_ones_too(tiers, tmp_path):
    root = tmp_path / "cold"
    a = tiers(FP, root, model_info={"path": "/models/alpha"})
    b = tiers(FP2, root)
    chain = make_chain(FP, 3)
    # One writer at a time: the test database (in-memory SQLite) locks a table per writer.
    write_all(a, chain)
    write_all(b, make_chain(FP2, 2))
    path_of(a, chain[0].key).unlink()  # a row without a file
    CacheBlock.objects.filter(key=chain[1].key.hex()).delete()  # a file without a row
    u = {x.fingerprint: x for x in usage(root)}[FP.hex]
    assert (u.files, u.rows) == (2, 2)

    result = clear(root, [FP.hex])
    assert (result.files, result.rows) == (2, 2)  # chain[1], chain[2]; rows of chain[0], chain[2]
    assert not (root / FP.hex).exists()
    assert row_keys(FP) == set()
    assert [x.fingerprint for x in usage(root)] == [FP2.hex]  # the other model is untouched
    # The live tier forgot the removed blocks: a load is a miss, never an error.
    assert not a.contains(chain[2].key) and a.load(chain[2].key) is None
    # And it can write again: the directory comes back, with a row for the new file.
    a2 = tiers(FP, root)
    write_all(a2, make_chain(FP, 1, first_token=100))
    assert len(row_keys(FP)) == 1
    with pytest.raises(ValueError):
        clear(root, ["../etc"])
