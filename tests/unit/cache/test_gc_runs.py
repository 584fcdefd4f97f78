"""GC run records (GCRun rows): written by the periodic Huey task and by a manual run, trimmed to
the newest GCRun.KEEP."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

from datetime import datetime, timedelta, timezone

import pytest
from django.test import override_settings

from cache import tasks
from cache.models import GCRun
from tests.support.cache.cold_blocks import FP, make_block, path_of, tiers, write_all  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_periodic_task_records_its_run(tiers, tmp_path):
    from cache.tasks import collect_cold_cache

    root = tmp_path / "cold"
    tier = tiers(root=root)
    blocks = [make_block(FP, (i, 5, 5, 5)) for i in range(4)]
    write_all(tier, blocks)
    size = path_of(tier, blocks[0].key).stat().st_size
    with override_settings(
        OMLX_COLD_CACHE_DIR=root, OMLX_COLD_CACHE_MAX_BYTES=size, OMLX_COLD_CACHE_TTL_SECONDS=None
    ):
        collect_cold_cache.call_local()
        manual = tasks.run("manual")
    first, second = sorted(GCRun.objects.all(), key=lambda r: r.id)
    assert (first.trigger, first.evicted, first.expired, first.files, first.bytes) == (
        "periodic",
        3,
        0,
        1,
        size,
    )
    assert first.removed_bytes == 3 * size and first.seconds >= 0
    assert (second.trigger, second.evicted, second.files) == ("manual", 0, 1) and manual.files == 1
    assert [r.id for r in tasks.recent(10)] == [second.id, first.id]  # newest first


def test_only_the_newest_runs_are_kept(tmp_path):
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    GCRun.objects.bulk_create(
        [
            GCRun(
                started=old + timedelta(minutes=i),
                seconds=0.1,
                files=0,
                bytes=0,
                expired=0,
                evicted=0,
                removed_bytes=0,
                stale_rows=0,
            )
            for i in range(GCRun.KEEP + 5)
        ]
    )
    with override_settings(OMLX_COLD_CACHE_DIR=tmp_path):
        tasks.run("manual")
    assert GCRun.objects.count() == GCRun.KEEP
    assert GCRun.objects.filter(trigger="manual").count() == 1
    oldest = GCRun.objects.order_by("started").first().started
    assert oldest == old + timedelta(minutes=6)  # the 6 oldest went


def test_no_cold_tier_no_run_and_a_bad_trigger_is_refused():
    with override_settings(OMLX_COLD_CACHE_DIR=None):
        assert tasks.run("manual") is None
    assert GCRun.objects.count() == 0
    with pytest.raises(ValueError):
        tasks.run("sometimes")
