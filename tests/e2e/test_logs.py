"""The Logs page in Chromium against a live `omlx serve`: the tail of server.log as a table, the
level filter, and a line that appears by itself (follow) after a request is served."""

import re

import httpx
from playwright.sync_api import expect


def test_logs_show_and_follow_the_server_log(page, admin_server, shot):
    # a request first, so the log has a line of ours before the page opens
    headers = {"Authorization": f"Bearer {admin_server.api_key}"}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    first = httpx.post(
        admin_server.url + "/v1/chat/completions", json=body, headers=headers, timeout=120
    ).json()
    page.goto(admin_server.url + "/admin/logs/")
    rows = page.locator("#log-rows tr.line")
    expect(rows.filter(has_text=f"{first['id']}-0 finished")).to_have_count(1)
    expect(page.locator("#log-follow")).to_have_text("Following new lines")
    page.evaluate("window.__same_page = true")
    before = rows.count()

    second = httpx.post(
        admin_server.url + "/v1/chat/completions", json=body, headers=headers, timeout=120
    ).json()
    line = rows.filter(has_text=f"{second['id']}-0 finished")
    expect(line).to_have_count(1)  # pushed over the websocket: the page was not reloaded
    assert page.evaluate("window.__same_page") is True and rows.count() > before
    expect(line.locator(".extra")).to_contain_text("completion_tokens=2")
    expect(line.locator(".extra")).to_contain_text("hot_cached_tokens=")
    shot(page, "logs-follow")

    page.select_option("select[name=level]", "WARNING")
    expect(page).to_have_url(re.compile(r"level=WARNING"))
    expect(page.locator(f"#log-rows tr.line:has-text('{second['id']}')")).to_have_count(0)
    page.fill("input[name=lines]", "zero")
    page.click("#log-filter button[type=submit]")
    expect(page.locator("#log-view .error")).to_contain_text("Lines must be a whole number")
    shot(page, "logs-filtered")
