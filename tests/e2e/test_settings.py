"""The Settings page in Chromium against a live `omlx serve`: every row of the settings table with
its source; a change is saved to settings.json and shows its new source; a bad value is refused
with a message and nothing saved; a setting that needs a restart is marked, and the Restart button
restarts the server (the same process re-executes itself), after which it is in force."""

import json
import re
import shutil
import socket
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from omlx_site import config
from tests.support.server import ServerProcess
from tests.e2e.conftest import API_KEY

RESTART_TIMEOUT = 120_000  # ms: the server stops, re-executes and migrates on a busy CPU


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def admin_server(tmp_path_factory, model_dir):
    """This module's own server (the restart test restarts it), on a fixed port so that the page
    finds it again after the restart."""
    models = tmp_path_factory.mktemp("settings-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path_factory.mktemp("settings-home")
    server = ServerProcess(
        ["--port", str(_free_port()), "--model-dir", str(models), "--api-key", API_KEY], home
    )
    server.api_key = API_KEY
    server.home = home
    yield server
    server.stop()


def _post_status(server, nbytes: int) -> int:
    """The status of a POST /v1/chat/completions with a body of ``nbytes`` bytes."""
    body = json.dumps(
        {"model": "tiny", "messages": [{"role": "user", "content": "x" * nbytes}], "max_tokens": 1}
    ).encode()
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        data=body,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _stored(server) -> dict:
    return json.loads((server.home / "settings.json").read_text())


def _row(page, key):
    return page.locator(f'#settings tr[data-key="{key}"]')


def _save(page, key, value):
    row = _row(page, key)
    row.get_by_label(f"value of {key}").fill(value)
    row.get_by_role("button", name="Save").click()


def test_every_setting_with_its_source_saved_and_refused(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/settings/")
    expect(page.locator("#settings tbody tr")).to_have_count(len(config.SETTINGS))
    for setting in config.SETTINGS:
        expect(_row(page, setting.key)).to_be_visible()
    # Given as flags: shown as such, not editable; the API key never appears.
    expect(_row(page, "api_key").locator(".source")).to_have_text("flag")
    expect(_row(page, "api_key").locator(".value")).to_contain_text("set (hidden)")
    assert API_KEY not in page.content()
    expect(_row(page, "model_dir").locator(".locked")).to_contain_text("given as --model-dir")
    expect(_row(page, "hf_cache").locator(".source")).to_have_text("environment")  # tests/conftest.py
    expect(_row(page, "hf_cache").locator(".current")).to_have_text("off")
    expect(_row(page, "max_queued_requests").locator(".source")).to_have_text("default")
    shot(page, "settings-initial")

    # A good value: saved to settings.json, its source is the file, in force at once.
    _save(page, "max_queued_requests", "7")
    expect(page.locator("#settings-table [role=status]")).to_contain_text("max_queued_requests: 7 saved")
    expect(page.locator("#settings-table [role=status]")).to_contain_text("in force now")
    expect(_row(page, "max_queued_requests").locator(".source")).to_have_text("settings.json")
    expect(_row(page, "max_queued_requests").get_by_label("value of max_queued_requests")).to_have_value("7")
    assert _stored(admin_server)["max_queued_requests"] == 7

    # Bad values: a clear message, nothing saved.
    _save(page, "max_queued_requests", "lots")
    expect(page.locator("#settings-table [role=alert]")).to_contain_text("'lots' is not an integer")
    expect(page.locator("#settings-table [role=alert]")).to_contain_text("Nothing was saved")
    _save(page, "paged_ssd_cache_ttl", "-5")
    expect(page.locator("#settings-table [role=alert]")).to_contain_text("must be > 0")
    _save(page, "workers", "0")
    expect(page.locator("#settings-table [role=alert]")).to_contain_text("--workers 0 needs --redis-url")
    stored = _stored(admin_server)
    assert (
        stored["max_queued_requests"] == 7 and "paged_ssd_cache_ttl" not in stored and "workers" not in stored
    )
    shot(page, "settings-refused")

    # Reset: the key leaves the file, the default applies again.
    _row(page, "max_queued_requests").get_by_role("button", name="Reset").click()
    expect(_row(page, "max_queued_requests").locator(".source")).to_have_text("default")
    assert "max_queued_requests" not in _stored(admin_server)
    # In force at once: a smaller request body limit answers the next request with a 413.
    _save(page, "max_request_size", "2KiB")
    expect(_row(page, "max_request_size").locator(".source")).to_have_text("settings.json")
    assert _post_status(admin_server, 4096) == 413
    _row(page, "max_request_size").get_by_role("button", name="Reset").click()
    expect(_row(page, "max_request_size").locator(".source")).to_have_text("default")
    assert _post_status(admin_server, 4096) != 413  # (the tiny model may refuse so long a prompt: 400)
    # A reload reads it all again from the server.
    page.reload()
    expect(_row(page, "max_queued_requests").get_by_label("value of max_queued_requests")).to_have_value(
        "256"
    )


def test_settings_that_start_processes_are_read_only_even_to_a_crafted_post(page, admin_server, tmp_path):
    """mcp_config names commands the server spawns: the page shows it without a form, and a POST
    made by hand from the logged-in page (with its CSRF token) is refused with a 403."""
    witness = tmp_path / "spawned"
    launcher = tmp_path / "mcp.json"
    launcher.write_text(json.dumps({"mcpServers": {"x": {"command": "touch", "args": [str(witness)]}}}))
    page.goto(admin_server.url + "/admin/settings/")
    for key in ("mcp_config", "redis_url", "redis_secret"):
        expect(_row(page, key).locator(".locked")).to_contain_text("read-only here")
        expect(_row(page, key).locator("form")).to_have_count(0)
    for form in ({"key": "mcp_config", "value": str(launcher)}, {"key": "mcp_config", "reset": "1"}):
        answer = page.evaluate(
            """async (form) => {
                const token = document.cookie.match(/omlx_csrftoken=([^;]+)/)[1];
                const r = await fetch("/admin/settings/save/", {
                    method: "POST",
                    body: new URLSearchParams(form),
                    headers: {"X-CSRFToken": token, "HX-Request": "true"},
                });
                return [r.status, await r.text()];
            }""",
            form,
        )
        assert answer[0] == 403, answer
        assert "never from a web page" in answer[1]
    assert "mcp_config" not in _stored(admin_server) and not witness.exists()


def test_a_restart_setting_is_marked_and_the_restart_applies_it(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/settings/")
    expect(page.locator("#pending-restart")).to_have_count(0)
    _save(page, "log_backups", "3")
    expect(page.locator("#settings-table [role=status]")).to_contain_text("applies after a restart")
    row = _row(page, "log_backups")
    expect(row.locator(".pending")).to_have_text("restart to apply")
    expect(row.locator(".in-force")).to_contain_text("5")  # the value the server runs with
    expect(row.locator(".source")).to_have_text("settings.json")
    expect(page.locator("#pending-restart")).to_contain_text("log_backups")
    assert _stored(admin_server)["log_backups"] == 3
    shot(page, "settings-pending-restart")

    pid = admin_server.process.pid
    starts = sum(line.startswith("omlx serving ") for line in admin_server.output)
    page.get_by_role("button", name="Restart omlx").click()
    expect(page.locator("#restart-state")).to_contain_text("Restarting omlx")
    # The page reloads by itself once the restarted server answers: nothing pending any more.
    expect(page.locator("#restart-state")).to_contain_text(
        "Every saved setting is in force", timeout=RESTART_TIMEOUT
    )
    expect(_row(page, "log_backups").locator(".pending")).to_have_count(0)
    expect(_row(page, "log_backups").get_by_label("value of log_backups")).to_have_value("3")
    assert sum(line.startswith("omlx serving ") for line in admin_server.output) == starts + 1
    assert any(line.startswith("omlx restarting") for line in admin_server.output)
    assert admin_server.process.poll() is None and admin_server.process.pid == pid  # re-executed in place
    # The flags were given again: still the sources they were.
    expect(_row(page, "api_key").locator(".source")).to_have_text("flag")
    assert re.search(r"omlx serving http://127\.0\.0\.1:\d+", "".join(admin_server.output))
    shot(page, "settings-after-restart")
