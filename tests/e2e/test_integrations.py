"""The Integrations page in Chromium against a live `omlx serve` (API key "test-key"): each
client's snippet for the server's address, the model switch (htmx), and the key left out."""

import os
import re
import subprocess
import sys

from playwright.sync_api import expect


def test_integrations_show_launch_print_for_the_chosen_model(page, admin_server, shot, tmp_path):
    page.goto(admin_server.url + "/admin/")
    page.click("nav >> text=Integrations")
    expect(page).to_have_url(re.compile(r".*/admin/integrations/$"))
    for client in ("claude", "codex", "opencode", "aider"):
        expect(page.locator(f"#integration-{client} code.launch")).to_have_text(
            f"omlx launch --model tiny {client}"
        )
    claude = page.locator("#integration-claude pre.snippet")
    expect(claude).to_contain_text(f"export ANTHROPIC_BASE_URL={admin_server.url}\n")
    expect(claude).to_contain_text("export ANTHROPIC_AUTH_TOKEN=YOUR_OMLX_API_KEY")
    assert admin_server.api_key not in page.content()
    shot(page, "integrations")

    page.select_option("select[name=model]", "tiny2")
    expect(page).to_have_url(re.compile(r"model=tiny2"))
    expect(page.locator("#integration-codex code.launch")).to_have_text("omlx launch --model tiny2 codex")
    shown = page.locator("#integration-codex pre.snippet").inner_text()

    # the same text as `omlx launch --print` (the key given there is the real one)
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "omlx_site.cli",
            "launch",
            "--url",
            admin_server.url,
            "--api-key",
            admin_server.api_key,
            "--model",
            "tiny2",
            "--print",
            "codex",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMLX_HOME": str(tmp_path)},
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == shown.strip().replace("YOUR_OMLX_API_KEY", admin_server.api_key)
