"""The Keys page in Chromium: create a key with chosen scopes (shown once, and it works on the API
with exactly those scopes), see its requests counted, revoke it (confirmed), and it is refused."""

import re

import httpx
from playwright.sync_api import expect


def test_create_use_and_revoke_a_key(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/keys/")
    page.fill("input[name=name]", "e2e-models")
    page.uncheck("input[name=scope][value=inference]")
    page.check("input[name=scope][value=models]")
    page.click("#key-form button")
    secret = page.locator("#new-key code").inner_text()
    assert re.fullmatch(r"omlx-[0-9a-f]{8}-[\w-]{43}", secret)
    row = page.locator("#keys tr", has_text="e2e-models")
    expect(row).to_contain_text("models")
    shot(page, "keys-created")

    headers = {"Authorization": f"Bearer {secret}"}
    assert httpx.get(admin_server.url + "/v1/models/status", headers=headers).status_code == 200
    assert httpx.get(admin_server.url + "/v1/models", headers=headers).status_code == 403  # no inference
    page.goto(admin_server.url + "/admin/keys/")
    expect(page.locator("#new-key")).to_have_count(0)  # shown once
    expect(row.locator("td.requests")).to_have_text("2")

    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button", has_text="Revoke").click()
    expect(page.locator("#keys-list .messages")).to_contain_text("Revoked key")
    expect(page.locator("#keys tr", has_text="e2e-models")).to_have_count(0)
    assert httpx.get(admin_server.url + "/v1/models/status", headers=headers).status_code == 401
