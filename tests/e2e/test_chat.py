"""The Chat page in Chromium against a live `omlx serve` (the Huey hand-off): an answer streams
into its bubble over several websocket messages, then its numbers; the same conversation in a new
chat comes from the hot tier; Stop ends a long answer; in Redis mode the worker process answers."""

import os
import re
import shutil
import sys

import pytest
from playwright.sync_api import expect

from tests.support.server import ServerProcess
from tests.e2e.conftest import API_KEY, login
from tests.support.redis_server import REDIS, Process, RedisServer
from tests.support.redis_server import SECRET as REDIS_SECRET

# Records the answer's length after every websocket message, until its numbers arrive.
RECORD = (
    """turn => {
  window.__lengths = [];
  document.body.addEventListener("htmx:wsAfterMessage", () => {
    const text = document.getElementById(`answer-${turn}-text`);
    if (text && !document.querySelector(`#answer-${turn}-stats[data-prompt]`)) """
    """window.__lengths.push(text.textContent.length);
  });
}"""
)


# Clicks Stop from the page at the first websocket message that puts words in the answer: the tiny
# model writes its 3,000 tokens in seconds, and a click from the test process (which waits for the
# button to hold still while each message re-renders the controls) came after the answer's end in
# 2 of about 10 full runs.
STOP_AT_FIRST_WORDS = """() => {
  const stop = () => {
    const text = document.getElementById("answer-1-text");
    const button = document.getElementById("chat-stop");
    if (text && text.textContent.trim() && button && !button.disabled) {
      document.body.removeEventListener("htmx:wsAfterMessage", stop);
      button.click();
    }
  };
  document.body.addEventListener("htmx:wsAfterMessage", stop);
}"""


def open_chat(page, server):
    page.goto(server.url + "/admin/chat/")
    expect(page.locator("#chat-controls #chat-send")).to_be_enabled()
    expect(page.locator(".empty-chat")).to_be_visible()  # the socket is connected and said so


def send(page, message, max_tokens="24"):
    page.fill("#chat-max-tokens", max_tokens)
    page.fill("#chat-temperature", "0")
    page.fill("#chat-message", message)
    page.press("#chat-message", "Enter")


def numbers(page, turn):
    stats = page.locator(f"#answer-{turn}-stats[data-prompt]")
    expect(stats).to_be_visible(timeout=120_000)
    return {
        k: int(stats.get_attribute(f"data-{k}")) for k in ("prompt", "hot", "cold", "computed", "generated")
    }


def test_chat_streams_an_answer_with_its_cache_numbers(page, admin_server, shot):
    open_chat(page, admin_server)
    page.select_option("#chat-model", "tiny")
    page.fill("#chat-system", "You are a helpful assistant that answers briefly and clearly.")
    page.evaluate(RECORD, 1)
    send(page, "Say hello <b>world</b>")
    first = numbers(page, 1)
    lengths = page.evaluate("window.__lengths")
    growing = [n for i, n in enumerate(lengths) if n > 0 and (i == 0 or n > lengths[i - 1])]
    assert len(growing) >= 3, lengths  # the bubble grew over several messages before the numbers came
    expect(page.locator("#turn-1 .bubble.user .text")).to_have_text("Say hello <b>world</b>")  # escaped
    assert page.locator("#turn-1 .bubble.user b").count() == 0
    assert first["generated"] >= 3 and first["hot"] + first["cold"] + first["computed"] == first["prompt"]
    stats = page.locator("#answer-1-stats")
    expect(stats).to_contain_text("hot")
    expect(stats).to_contain_text("cold")
    expect(stats).to_contain_text("computed")
    expect(stats).to_contain_text("TTFT")
    expect(stats).to_contain_text("tokens/s")
    expect(page.locator("#chat-message")).to_have_value("")
    shot(page, "chat-answer")

    page.click("#chat-new")
    expect(page.locator(".empty-chat")).to_be_visible()
    assert page.locator(".turn").count() == 0
    send(page, "Say hello <b>world</b>")
    again = numbers(page, 2)
    assert again["prompt"] == first["prompt"] and again["hot"] > 0  # computed once, reused now
    assert again["computed"] < first["computed"]
    shot(page, "chat-hot-again")


def test_stop_and_error_bubbles(page, admin_server, shot):
    open_chat(page, admin_server)
    page.evaluate(STOP_AT_FIRST_WORDS)
    send(page, "Tell me a very long story.", max_tokens="3000")
    expect(page.locator("#answer-1-text")).not_to_be_empty(timeout=120_000)
    expect(page.locator("#answer-1-stats .badge")).to_have_text("stopped")
    assert numbers(page, 1)["generated"] < 3000
    expect(page.locator("#chat-send")).to_be_enabled()

    page.fill("#chat-temperature", "hot")
    page.fill("#chat-message", "hello")
    page.press("#chat-message", "Enter")
    expect(page.locator(".chat-notice")).to_contain_text("Temperature: 'hot' is not a number.")
    page.fill("#chat-temperature", "0")
    page.fill("#chat-system", "word " * 5000)
    page.fill("#chat-message", "hello")
    page.press("#chat-message", "Enter")
    error = page.locator("#answer-2.bubble.error")
    expect(error).to_contain_text("maximum context length")
    assert error.get_attribute("data-status") == "400"
    shot(page, "chat-errors")
    page.fill("#chat-system", "")
    send(page, "and now a short one")
    assert numbers(page, 3)["generated"] >= 1  # the socket lives on
    assert re.search(r"stopped", page.locator("#answer-1-stats").inner_text())


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory, model_dir):
    """`omlx serve --redis-url` with no worker threads, and one `omlx worker` process that runs the
    model (tests/live/test_redis_mode.py has the same setup for the API)."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/install_system_deps.sh installs it)")
    redis = RedisServer(tmp_path_factory.mktemp("redis"))
    url = redis.url
    models = tmp_path_factory.mktemp("redis-chat-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path_factory.mktemp("redis-chat-home")
    server = ServerProcess(
        [
            "--redis-url",
            url,
            "--redis-secret",
            REDIS_SECRET,
            "--model-dir",
            str(models),
            "--api-key",
            API_KEY,
        ],
        home,
    )
    server.api_key = API_KEY
    env = dict(
        os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"), PYTHONUNBUFFERED="1"
    )
    env.pop("OMLX_API_KEY", None)
    worker = Process(
        [sys.executable, "-m", "omlx_site.cli", "worker", "--redis-url", url, "--model-dir", str(models)]
        + ["--redis-secret", REDIS_SECRET],
        env,
        "taking requests from",
    )
    yield server, worker
    worker.stop()
    server.stop()
    redis.stop()


def test_chat_in_redis_mode(browser, redis_server, shot):
    """The answer is written by the worker process and reaches the page through Redis."""
    server, worker = redis_server
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    try:
        login(page, server)
        open_chat(page, server)
        send(page, "Hello from Redis mode")
        stats = numbers(page, 1)
        assert stats["generated"] >= 1 and page.locator("#answer-1-text").inner_text()
        assert any("omlx.engine: loaded" in line for line in worker.output)
        assert not any("omlx.engine: loaded" in line for line in server.output)
        page.click("#chat-new")
        send(page, "Hello from Redis mode")
        assert numbers(page, 2)["hot"] > 0
        shot(page, "chat-redis-mode")
    finally:
        context.close()
