"""Browser tests of the admin console: a real `omlx serve` and Debian's Chromium driven by
Playwright (its Python package talks to the browser; no browser download: /usr/bin/chromium,
installed by scripts/install_system_deps.sh).

Screenshots go to tests/artifacts/screenshots/ (OMLX_TEST_ARTIFACTS to move them): CI keeps them.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.support.server import ServerProcess

API_KEY = "test-key"
ARTIFACTS = Path(os.environ.get("OMLX_TEST_ARTIFACTS") or Path(__file__).resolve().parents[1] / "artifacts")
CHROMIUM = os.environ.get("OMLX_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# As the machine has no network, Chromium's own background connections only cost time.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


ADMIN_MODELS = {"tiny": ("qwen2", "tiny"), "tiny2": ("qwen2", "tiny")}


@pytest.fixture(scope="module")
def admin_server(serve):
    """A live `omlx serve` with the API key "test-key" and two tiny models, "tiny" and "tiny2",
    shared by the modules that leave its models as they found them (loaded or not, no pins,
    TTLs or aliases); test_models.py changes them and takes ``private_admin_server``."""
    server = serve("--api-key", API_KEY, models=ADMIN_MODELS)
    server.api_key = API_KEY
    return server


@pytest.fixture(scope="module")
def private_admin_server(tmp_path_factory, model_dir):
    """Like ``admin_server``, but this module's own."""
    models = tmp_path_factory.mktemp("admin-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny2")
    server = ServerProcess(
        ["--model-dir", str(models), "--api-key", API_KEY], tmp_path_factory.mktemp("admin-home")
    )
    server.api_key = API_KEY
    yield server
    server.stop()


# Per module: Playwright's sync API keeps an event loop running in the main thread while it is open,
# and tests after the browser tests call asyncio.run.
@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: run `bash scripts/install_system_deps.sh` "
            "(Debian package chromium), or set OMLX_CHROMIUM"
        )
    from playwright.sync_api import expect, sync_playwright

    # expect() waits 5 s by default: less than the history's 5 s between points, and less than a
    # loaded machine may need; as long as the pages' actions (a passing check returns at once).
    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def login(page, server) -> None:
    page.goto(server.url + "/admin/login/")
    page.fill("input[name=api_key]", server.api_key)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/admin/(?!login).*"))


@pytest.fixture
def page(browser, admin_server):
    """A new browser context (own cookies), logged in to admin_server; page errors and what the
    Content-Security-Policy blocked fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # What the console's Content-Security-Policy blocked (an inline script, an hx-on handler).
    pg.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    login(pg, admin_server)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def shot():
    """shot(page, name): a full-page PNG in tests/artifacts/screenshots/NAME.png."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)

    def take(pg, name: str) -> Path:
        path = folder / f"{name}.png"
        pg.screenshot(path=str(path), full_page=True)
        return path

    return take
