"""The Models page in Chromium against a live `omlx serve`: load with the button and see the row
become loaded, pin, TTL, alias, a bad TTL shows an error, unload."""

import re

import pytest
from playwright.sync_api import expect

LOAD_TIMEOUT = 120_000  # ms: loading a model on a busy CPU


@pytest.fixture(scope="module")
def admin_server(private_admin_server):
    """A server of this module's own: pins, TTLs, aliases and unloads would follow other modules."""
    return private_admin_server


def test_load_pin_ttl_alias_and_unload(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/models/")
    row = page.locator('tr[data-model="tiny2"]')
    expect(row.locator(".state")).to_have_text("not loaded")
    expect(page.locator('tr[data-model="tiny"]')).to_be_visible()
    shot(page, "models-initial")

    row.get_by_role("button", name="Load").click()
    expect(row.locator(".state")).to_have_text("loaded", timeout=LOAD_TIMEOUT)
    expect(row.get_by_role("button", name="Unload")).to_be_visible()
    expect(page.locator("#models-table")).not_to_have_attribute("hx-trigger", re.compile("every"))

    row.get_by_role("button", name="Pin").click()
    expect(row.locator(".pin")).to_have_text("pinned")
    row.get_by_label("TTL of tiny2 in seconds").fill("120")
    row.get_by_role("button", name="Set TTL").click()
    expect(row.locator(".ttl")).to_have_text("120 s")
    row.get_by_label("alias of tiny2").fill("tiny-two")
    row.get_by_role("button", name="Set alias").click()
    expect(row.locator(".alias")).to_have_text("tiny-two")
    shot(page, "models-loaded-pinned")

    row.get_by_label("TTL of tiny2 in seconds").fill("soon")
    row.get_by_role("button", name="Set TTL").click()
    alert = page.locator("#models-table .messages [role=alert]")
    expect(alert).to_contain_text("ttl_seconds: 'soon' is not a number")
    expect(row.locator(".ttl")).to_have_text("120 s")  # nothing saved
    shot(page, "models-bad-ttl")

    row.locator("summary", has_text="Settings").click()
    row.get_by_label("top_p").fill("5")
    row.get_by_role("button", name="Save settings").click()
    expect(alert).to_contain_text("top_p")
    row.locator("summary", has_text="Settings").click()
    row.get_by_label("top_p").fill("0.9")
    row.get_by_role("button", name="Save settings").click()
    expect(page.locator("#models-table .messages [role=status]")).to_contain_text("settings saved")

    row.get_by_role("button", name="Unload").click()  # pinned: refused
    expect(alert).to_contain_text("pinned; unpin it first")
    row.get_by_role("button", name="Unpin").click()
    expect(row.locator(".pin")).to_have_text("–")
    row.get_by_role("button", name="Unload").click()
    expect(row.locator(".state")).to_have_text("not loaded", timeout=LOAD_TIMEOUT)
    expect(row.locator(".alias")).to_have_text("tiny-two")  # settings outlive the engine
    shot(page, "models-unloaded")
