"""The Cache page in Chromium against a live `omlx serve`: a request's blocks show up hot, the
probe measures the SSD directory and suggests settings, GC runs are listed, clear empties both
tiers."""

import re

import httpx
from playwright.sync_api import expect

from tests.e2e.conftest import API_KEY


def _chat(server, text):
    response = httpx.post(
        server.url + "/v1/chat/completions",
        timeout=120,
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={
            "model": "tiny",
            "max_tokens": 3,
            "temperature": 0,
            "messages": [{"role": "user", "content": text}],
        },
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_hot_blocks_probe_gc_and_clear(page, admin_server, shot):
    _chat(admin_server, "Tell me about the KV cache of a language model, in detail. " * 8)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm of the Clear buttons
    page.goto(admin_server.url + "/admin/cache/")
    row = page.locator('tr[data-model="tiny"]')
    expect(row.locator(".hot-blocks")).to_have_text(re.compile(r"^[1-9]\d*$"))
    expect(row).to_contain_text("loaded")

    page.locator("#run-probe").click()
    suggestions = page.locator("#probe-suggestions li")
    expect(suggestions).to_have_count(3, timeout=60_000)
    expect(suggestions.nth(0)).to_contain_text(re.compile(r"SSD tier .*tiny|probe again"))
    expect(page.locator("#probe-results")).to_contain_text("MB/s")
    shot(page, "cache-probe")

    page.locator("#run-gc").click()
    expect(page.locator("#gc-runs")).to_contain_text("manual")
    expect(page.locator("#cache-panels .messages")).to_contain_text("GC removed")

    # The writer thread puts the blocks on disk shortly after the request.
    page.get_by_role("button", name="Refresh").click()
    # The refreshed panel has no messages; clicking Clear before it lands would let the refresh's
    # answer replace the clear's (both swap #cache-panels).
    expect(page.locator("#cache-panels .messages")).to_have_text("")
    shot(page, "cache-before-clear")
    row.get_by_role("button", name="Clear").click()
    expect(page.locator("#cache-panels .messages")).to_contain_text("Cleared tiny")
    expect(row.locator(".hot-blocks")).to_have_text("0")
    expect(row.locator(".cold-files")).to_have_text("0")
    shot(page, "cache-cleared")
