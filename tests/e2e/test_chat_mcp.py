"""MCP tools in the Chat page, in Chromium against a live `omlx serve --mcp-config` whose stdio MCP
server (tests/support/mcp_servers/stdio_server.py) offers one tool: the model's call, the tool's result and
the answer after it appear as steps of the answer. "Tool use: required" makes the random-weight
model's first answer a call (see tests/unit/test_mcp_chat.py)."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.support.server import ServerProcess
from tests.e2e.conftest import API_KEY, login

STDIO = str(Path(__file__).resolve().parents[1] / "support" / "mcp_servers" / "stdio_server.py")


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("mcp-chat-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    config = tmp_path_factory.mktemp("mcp-chat-config") / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"local": {"command": sys.executable, "args": [STDIO, "forecast"]}}})
    )
    server = ServerProcess(
        ["--model-dir", str(models), "--api-key", API_KEY, "--mcp-config", str(config)],
        tmp_path_factory.mktemp("mcp-chat-home"),
    )
    server.api_key = API_KEY
    try:
        assert server.wait_for_output("MCP server local running", 120), "".join(server.output)
        yield server
    finally:
        server.stop()


def test_the_models_tool_call_and_its_result_are_steps_of_the_answer(browser, mcp_server, shot):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        login(page, mcp_server)
        page.goto(mcp_server.url + "/admin/chat/")
        expect(page.locator("#chat-controls #chat-send")).to_be_enabled()
        expect(page.locator(".empty-chat")).to_be_visible()
        expect(page.locator("#chat-mcp-tools")).to_be_checked()
        expect(page.locator(".chat-settings")).to_contain_text("1 tool of 1 running server; 1 configured")
        page.select_option("#chat-tool-choice", "required")
        page.fill("#chat-max-tokens", "120")
        page.fill("#chat-temperature", "0")
        page.fill("#chat-message", "Will it snow in Oslo tomorrow?")
        page.press("#chat-message", "Enter")
        stats = page.locator("#answer-1-stats[data-prompt]")
        expect(stats).to_be_visible(timeout=120_000)
        step = page.locator('#answer-1-steps .tool-step[data-tool="local__forecast"]')
        expect(step).to_have_count(1)
        arguments = json.loads(step.locator(".tool-args").text_content())
        result = page.locator("#answer-1-step-1-result")
        expect(result).to_have_attribute("data-error", "false")
        expect(result.locator("pre")).to_have_text(
            {"Oslo": "Oslo: 4 C, snow", "Paris": "Paris: 12 C, rain", "Lima": "Lima: 22 C, sun"}[
                arguments["city"]
            ]
        )
        expect(page.locator("#answer-1-steps #answer-1-text-2")).to_have_count(
            1
        )  # the answer after the result
        expect(stats).to_have_attribute("data-tool-calls", "1")
        expect(stats).to_contain_text("1 tool call in 2 rounds")
        shot(page, "chat-mcp-tool-call")
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
