"""The Models page in Chromium against a live `omlx serve`: load with the button and see the row
become loaded, pin, TTL, alias, a bad TTL shows an error, unload; each row says where its model
came from (model dir, LM Studio, Ollama) and other apps' GGUF models have an Import button."""

import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import API_KEY
from tests.support.other_apps_trees import LMSTUDIO_MLX, OLLAMA_LIBRARY, build_lmstudio, build_ollama
from tests.support.server import ServerProcess

LOAD_TIMEOUT = 120_000  # ms: loading a model on a busy CPU


@pytest.fixture(scope="module")
def admin_server(tmp_path_factory, model_dir):
    """A server of this module's own (pins, TTLs, aliases and unloads would follow other modules):
    "tiny" and "tiny2" in its model directory, LM Studio's and Ollama's folders beside."""
    base = tmp_path_factory.mktemp("admin-models")
    for name in ("tiny", "tiny2"):
        shutil.copytree(model_dir("qwen2", "tiny"), base / "models" / name)
    lmstudio = build_lmstudio(base / "lmstudio", model_dir("qwen2", "tiny"))
    ollama = build_ollama(base / "ollama", base)
    args = ["--model-dir", str(base / "models"), "--api-key", API_KEY]
    args += ["--lmstudio-models", str(lmstudio), "--ollama-models", str(ollama)]
    server = ServerProcess(args, tmp_path_factory.mktemp("admin-home"))
    server.api_key = API_KEY
    yield server
    server.stop()


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


def test_rows_say_where_models_came_from(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/models/")
    expect(page.locator('tr[data-model="tiny"] .origin')).to_have_text("model dir")
    expect(page.locator(f'tr[data-model="{LMSTUDIO_MLX}"] .origin')).to_have_text("LM Studio")
    ollama = page.locator(f'tr[data-model="{OLLAMA_LIBRARY}"]')
    expect(ollama.locator(".origin")).to_have_text("Ollama")
    expect(ollama.locator(".state")).to_have_text("to import")
    shot(page, "models-other-apps")
    ollama.get_by_role("button", name="Import").click()  # converted, or refused with a message
    expect(page.locator("#models-table .messages p")).to_contain_text(re.compile(r"\S"))
