"""MCP tools in the console's chat (admin_panel/consumers/chat.py, admin_panel/chat_tools.py), in
process: the real ASGI app, a real engine of a tiny random-weight model, a real stdio MCP server
(tests/support/mcp_servers/stdio_server.py) run by the real manager.

A random-weight model does not call tools by itself, so the first round uses the page's "Tool use:
required", which constrains the model's output to one call of the offered tools (the same
grammar as the API's tool_choice "required"): the call, its arguments included, is the model's
own output. Everything after that is the real loop: the call runs on the MCP server, its result is
rendered back into the prompt through the chat template and the model generates again."""

import json
import re
import sys
from pathlib import Path

import pytest
from django.test import AsyncClient

from inference.mcp import config as mcp_config
from inference.mcp import manager as mcp_manager
from tests.support.chat_page import SYSTEM, assert_stopped, open_page, run, stats, stop_answer, text_parts
from tests.support.chat_page import chat, chat_models  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

SERVER = str(Path(__file__).parents[1] / "support" / "mcp_servers" / "stdio_server.py")


@pytest.fixture
def mcp_tools(request, tmp_path):
    """A running MCP manager whose one stdio server offers the tools named by the test's param."""
    specs = mcp_config.parse(
        {"mcpServers": {"local": {"command": sys.executable, "args": [SERVER, *request.param]}}}
    )
    manager = mcp_manager.start(specs, log_dir=tmp_path)  # the server's stderr: tmp_path/mcp-local.log
    try:
        assert manager.wait_started(60), manager.servers()
        yield manager
    finally:
        mcp_manager.stop()


async def answer(page, **fields):
    await page.send(mcp_tools="on", tool_choice="required", max_tokens="120", **fields)
    fragments = await page.until(r'id="answer-1-stats"[^>]*data-prompt')
    await page.until(r'id="chat-controls"')
    return fragments


def step_of(fragments, step=1):
    call = next(f for f in fragments if f'id="answer-1-step-{step}"' in f)
    result = next(f for f in fragments if f'id="answer-1-step-{step}-result"' in f and "Running" not in f)
    arguments = re.search(r'<pre class="tool-args">(.*?)</pre>', call, re.S).group(1)
    text = re.search(r"<pre>(.*?)</pre>", result, re.S).group(1)
    return call, json.loads(_unescape(arguments)), result, _unescape(text)


def _unescape(text):
    import html

    return html.unescape(text)


def prompt_tokens(messages, tools):
    async def go():
        response = await AsyncClient().post(
            "/v1/chat/completions",
            json.dumps(
                {"model": "tiny", "messages": messages, "tools": tools, "temperature": 0, "max_tokens": 1}
            ),
            content_type="application/json",
        )
        assert response.status_code == 200, response.content
        return json.loads(response.content)["usage"]["prompt_tokens"]

    return run(go())


@pytest.mark.parametrize("mcp_tools", [["forecast"]], indirect=True)
def test_the_model_calls_a_tool_and_answers_from_its_result(chat, mcp_tools):
    async def go():
        page = await open_page()
        fragments = await answer(page, message="Will it snow in Oslo tomorrow?")
        await page.send(mcp_tools="on", max_tokens="4", message="Thanks.")  # tool use: auto
        follow_up = await page.until(r'id="answer-2-stats"[^>]*data-prompt')
        await page.comm.disconnect()
        return fragments, follow_up

    fragments, follow_up = run(go())
    call, arguments, result, text = step_of(fragments)
    assert 'data-tool="local__forecast"' in call
    # the model's own arguments, run by the real server
    assert set(arguments) == {"city"} and text.startswith(f"{arguments['city']}: ")
    assert 'data-error="false"' in result
    final = fragments[-1]
    assert 'data-tool-calls="1"' in final and 'data-rounds="2"' in final
    # the second round's prompt is the conversation with the call and its result, rendered by the
    # chat template: the API computes the same prompt for the same messages and tools
    tools = [t.openai_tool() for t in mcp_tools.tools()]
    call_id = "call"  # ids do not reach the template of this model (qwen2) ...
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Will it snow in Oslo tomorrow?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "local__forecast", "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "local__forecast", "content": text},
    ]
    assert stats(final)["prompt"] == prompt_tokens(messages, tools)
    # ... and the second round generated an answer (its own text part of the bubble)
    assert any('id="answer-1-text-2"' in f for f in fragments)
    assert stats(final)["generated"] >= 1
    # the conversation keeps the call, its result and the answer: the next message's prompt is theirs
    after = "".join(text_parts(fragments, 1, "text-2"))
    history = messages + [{"role": "assistant", "content": after}, {"role": "user", "content": "Thanks."}]
    assert "data-tool-calls" not in follow_up[-1]  # (no call this time)
    assert stats(follow_up[-1])["prompt"] == prompt_tokens(history, tools)
    assert stats(follow_up[-1])["hot"] >= stats(final)["prompt"] - 16  # the turn before was computed once


@pytest.mark.parametrize("mcp_tools", [["broken"]], indirect=True)
def test_a_failing_tool_is_an_error_result_for_the_model(chat, mcp_tools):
    async def go():
        page = await open_page()
        fragments = await answer(page, message="Call the tool.")
        await page.comm.disconnect()
        return fragments

    fragments = run(go())
    call, arguments, result, text = step_of(fragments)
    assert 'data-tool="local__broken"' in call and 'data-error="true"' in result
    assert text.endswith(f"the {arguments['part']} is broken")  # the tool's own error, as the model gets it
    assert 'data-rounds="2"' in fragments[-1]  # the model answered after the error


def test_use_tools_without_mcp_servers_is_a_notice(chat):
    async def go():
        page = await open_page()
        await page.send(mcp_tools="on")
        fragment = (await page.until(r"chat-notice"))[-1]
        await page.comm.disconnect()
        return fragment

    assert "No MCP tools are available" in run(go())


@pytest.mark.parametrize("mcp_tools", [["forecast"]], indirect=True)
def test_stop_ends_the_answer_after_a_tool_call(chat, mcp_tools):
    async def go():
        page = await open_page()
        await page.send(
            mcp_tools="on",
            tool_choice="required",
            max_tokens="3000",
            system="",
            message="Tell me a very long story about the weather in Oslo.",
        )
        await page.until(r'id="answer-1-step-1-result"[^>]*data-error')  # the tool ran
        return await stop_answer(page, r'<span id="answer-1-text-2"')  # once the next round writes

    assert_stopped(*run(go()))
