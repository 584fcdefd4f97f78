"""The Cache page (/admin/cache/) in process: Django's test client against a real model pool, its
engines' block caches and the cold-tier directory."""

import os
import re

import pytest
from django.test import override_settings

from cache.models import GCRun
from inference.pool import get_pool
from tests.support.admin_console import console, generate, post, wait_until  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ACTION = "/admin/cache/action/"
PROMPT = list(range(20, 80))


def _row(html, model_id):
    m = re.search(
        rf'<tr data-model="{re.escape(model_id)}" data-fingerprint="([0-9a-f]*)">(.*?)</tr>', html, re.S
    )
    assert m, f"no row for {model_id}"
    hot = re.search(r'class="num hot-blocks[^"]*">([^<]*)<', m.group(2)).group(1)
    cold = re.search(r'class="num cold-files">(\d+)<', m.group(2)).group(1)
    return m.group(1), hot, int(cold)


def _flush_cold(model_id):
    """Wait for the model's cold-tier writer: it stores its blocks' rows from its own thread, and
    the tests' in-memory SQLite (shared cache) fails a page's concurrent read of that table at once
    ("database table is locked"), where the server's file database waits up to its timeout."""
    engine = get_pool().loaded(model_id)
    engine.call(lambda e: e.prefix_cache.cold.flush())


def test_loaded_and_unloaded_models_hit_rates_and_clear(console):
    first = generate("tiny", PROMPT)
    assert first.usage.cached_tokens == 0
    assert generate("tiny", PROMPT).usage.cached_tokens == len(PROMPT) - 1
    generate("other", PROMPT[:30])
    _flush_cold("tiny")
    assert get_pool().unload("other")  # its blocks are written down: on disk only now

    html = console.get("/admin/cache/").content.decode()
    fp, hot, cold = _row(html, "tiny")
    assert int(hot) > 0 and cold > 0
    # tiny's hit rate, all from RAM: 59 of the 2 x 59 prompt tokens looked up (the last one of a
    # prompt is always computed).
    assert '<td class="num">50.0%</td>\n  <td class="num">0.0%</td>\n  <td class="num">50.0%</td>' in html
    fp2, hot2, cold2 = _row(html, "other")
    assert hot2 == "–" and cold2 > 0 and fp2 != fp
    assert 'hx-confirm="Remove every cached KV block of tiny, in RAM and on SSD?"' in html

    # A copy of tiny's folder has its fingerprint: one cold tier, two hot tiers, cleared together.
    generate("tiny2", PROMPT[:10])
    _flush_cold("tiny2")
    html = console.get("/admin/cache/panel/").content.decode()
    assert "same weights as tiny2" in html and "same weights as tiny:" in html
    response = post(console, ACTION, {"action": "clear", "fingerprint": fp})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Cleared tiny, tiny2:" in html
    assert _row(html, "tiny")[1:] == ("0", 0) and _row(html, "tiny2")[1:] == ("0", 0)
    assert not (get_pool().loaded("tiny").prefix_cache.cold.dir).exists()
    again = generate("tiny", PROMPT)
    assert again.usage.cached_tokens == 0 and again.usage.computed_prompt_tokens == len(PROMPT)
    _flush_cold("tiny")

    response = post(console, ACTION, {"action": "clear", "fingerprint": "all"})
    assert response.status_code == 200 and "Cleared every model" in response.content.decode()
    html = console.get("/admin/cache/panel/").content.decode()
    assert 'data-model="other"' not in html  # no blocks left anywhere: the row is gone
    assert _row(html, "tiny")[1:] == ("0", 0)


def test_gc_runs_are_recorded_and_shown(console):
    response = post(console, ACTION, {"action": "gc"})
    assert response.status_code == 200 and "GC removed 0 expired" in response.content.decode()
    run = GCRun.objects.get()
    assert run.trigger == "manual"
    assert "<td>manual</td>" in console.get("/admin/cache/").content.decode()


def test_bad_requests_show_messages(console):
    response = post(console, ACTION, {"action": "clear", "fingerprint": "../../etc"})
    assert response.status_code == 400 and "is not a model fingerprint" in response.content.decode()
    response = post(console, ACTION, {"action": "clear", "fingerprint": "0" * 32})
    assert response.status_code == 404
    assert post(console, ACTION, {"action": "boom"}).status_code == 400
    with override_settings(OMLX_COLD_CACHE_DIR=None):
        response = post(console, ACTION, {"action": "gc"})
        assert response.status_code == 409 and "The SSD tier is off" in response.content.decode()
        response = post(console, "/admin/cache/probe/", {})
        assert response.status_code == 409 and "no directory to probe" in response.content.decode()


def test_probe_runs_in_the_background_and_suggests(console, tmp_path):
    generate("tiny", PROMPT)  # a loaded model with a measured prefill speed
    response = post(console, "/admin/cache/probe/", {})
    assert response.status_code == 200
    html = wait_until(
        lambda: (lambda t: t if "every 1s" not in t else None)(
            console.get("/admin/cache/probe/").content.decode()
        )
    )
    assert 'id="probe-results"' in html, html
    suggestions = re.findall(r'<span class="badge">([a-z ]+)</span>', html)
    assert suggestions == ["ssd tier", "hot tier", "block size"]
    assert "keep the SSD tier for tiny" in html or "does not pay for tiny" in html
    assert not [n for n in os.listdir(tmp_path / "cold") if n.startswith(".omlx-probe")]
