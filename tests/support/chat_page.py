"""The Chat page's websocket (admin_panel/consumers/chat.py) in process, as the page uses it, for
tests/unit/test_admin_chat.py and test_mcp_chat.py: the ``chat`` fixture (a pool of tiny models,
the API's direct hand-off), a Page that sends the form's fields and collects the fragments, the
fragments read back, and an answer stopped from the page."""

import asyncio
import html
import json
import re
import shutil

import pytest
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from inference.api.common import limits
from inference.pool import close_pool

SYSTEM = "You are a terse assistant. Answer in one short line, and never use more words than needed."


@pytest.fixture(scope="module")
def chat_models(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("chat-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    shutil.copytree(model_dir("qwen3", "tiny"), models / "thinker")  # its prompt opens <think>
    return models


@pytest.fixture
def chat(chat_models, tmp_path):
    close_pool()
    with override_settings(
        OMLX_MODEL_DIR=chat_models,
        OMLX_API_HANDOFF="direct",
        OMLX_API_KEY=None,
        OMLX_COLD_CACHE_DIR=tmp_path / "cold",
    ):
        yield
    close_pool()


class Page:
    """One chat socket, as the page uses it: sends the form's fields, collects the fragments."""

    def __init__(self, comm):
        self.comm = comm
        self.received = []

    async def send(self, **fields):
        form = {"model": "tiny", "system": SYSTEM, "temperature": "0", "max_tokens": "8", "message": "hello"}
        form.update(fields)
        form["HEADERS"] = {"HX-Request": "true"}
        await self.comm.send_to(text_data=json.dumps(form))

    async def until(self, pattern, timeout=120):
        """Fragments received until one matches ``pattern``; that one last."""
        got = []
        while True:
            message = await self.comm.receive_from(timeout)
            self.received.append(message)
            got.append(message)
            if re.search(pattern, message):
                return got


async def open_page():
    from omlx_site.asgi import application

    comm = WebsocketCommunicator(application, "/ws/admin/chat/")
    connected, _ = await comm.connect()
    assert connected
    page = Page(comm)
    await page.until(r'id="chat-controls"')  # the empty log, then the controls
    return page


def text_parts(fragments, turn, part="text"):
    """The model text appended to answer ``turn`` (unescaped), fragment by fragment."""
    pattern = rf'<span id="answer-{turn}-{part}"[^>]*>(.*?)</span>'
    return [html.unescape(m) for f in fragments for m in re.findall(pattern, f, re.S)]


def stats(fragment):
    return {k: int(v) for k, v in re.findall(r'data-(prompt|hot|cold|computed|generated)="(\d+)"', fragment)}


def run(coro):
    return asyncio.run(coro)


async def stop_answer(page, pattern):
    """Wait for ``pattern`` (answer 1 writing), stop it from the page and close the socket: the
    fragments up to answer 1's stats, and the controls after them."""
    await page.until(pattern)
    await page.send(action="stop")
    fragments = await page.until(r'id="answer-1-stats"[^>]*data-prompt')
    controls = (await page.until(r'id="chat-controls"'))[-1]
    await page.comm.disconnect()
    return fragments, controls


def assert_stopped(fragments, controls, max_tokens=3000):
    """Answer 1 ended as stopped, short of ``max_tokens``; the stop button is off again and the
    model has no request in flight."""
    assert "stopped" in fragments[-1] and stats(fragments[-1])["generated"] < max_tokens
    assert 'id="chat-stop" ws-send name="action" value="stop" disabled' in controls
    assert limits.in_flight("tiny") == 0
