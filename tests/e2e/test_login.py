"""The console behind the API key: the login page, a wrong key, a logged-in page, logout."""

import re

from playwright.sync_api import expect


def test_pages_need_the_key(browser, admin_server, shot):
    context = browser.new_context()
    page = context.new_page()
    page.goto(admin_server.url + "/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/\?next="))
    page.fill("input[name=api_key]", "wrong")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("not the server's API key")
    shot(page, "login-wrong-key")
    page.fill("input[name=api_key]", admin_server.api_key)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/admin/login/"))
    expect(page.locator("header.topbar")).to_contain_text("Status")
    page.click("text=Log out")
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    context.close()


def test_htmx_is_served_offline(page, admin_server):
    # htmx and its websocket extension come from django-htmx's static files, not a CDN.
    assert page.evaluate("typeof htmx") == "object"
    sources = page.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
    assert sources and all(s.startswith(admin_server.url) for s in sources), sources
    assert page.evaluate("htmx.version").startswith("2.")
