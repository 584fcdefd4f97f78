"""The Status page in Chromium: the loaded model and the charts, and values that the websocket
updates while requests are served (no reload)."""

import re

import openai
from playwright.sync_api import expect


def test_status_page_updates_live(page, admin_server, shot):
    client = openai.OpenAI(
        base_url=admin_server.url + "/v1", api_key=admin_server.api_key, max_retries=0, timeout=120
    )
    client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=2
    )
    page.goto(admin_server.url + "/admin/")
    expect(page).to_have_url(re.compile(r".*/admin/status/$"))
    expect(page.locator("#status-models")).to_contain_text("tiny")
    expect(page.locator("#status-charts svg.chart")).to_have_count(6)
    expect(page.locator("nav a.active")).to_have_text("Status")
    page.evaluate("window.notReloaded = true")
    served = int(page.locator("#status-requests").inner_text())
    saved = page.locator("#status-tokens-saved").inner_text()
    charts_at = page.locator("#status-charts").get_attribute("data-at")

    prompt = "Tell me a story about the sea and the ships that sail on it. " * 6
    for _ in range(3):
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=8
        )

    expect(page.locator("#status-requests")).to_have_text(str(served + 3))
    expect(page.locator("#status-tokens-saved")).not_to_have_text(saved)
    expect(page.locator("#status-hot-rate")).not_to_have_text("–")
    expect(page.locator("#status-ttft")).to_contain_text("ms")
    # a new point (every 5 s) redraws the charts
    expect(page.locator("#status-charts")).not_to_have_attribute("data-at", charts_at)
    speed = page.locator("#status-charts svg.chart").nth(2)
    expect(speed).not_to_have_attribute("data-points", "0")
    assert page.evaluate("window.notReloaded") is True
    shot(page, "status")
