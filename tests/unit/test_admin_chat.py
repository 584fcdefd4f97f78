"""The Chat page's websocket (admin_panel/consumers/chat.py) in process: the real ASGI app
(omlx_site.asgi), real engines of tiny models, the API's hand-off (direct) and the in-memory
channel layer. The browser side is tests/e2e/test_chat.py."""

import asyncio
import json

import pytest
from django.test import AsyncClient, Client, override_settings

from admin_panel.chat import parse_form
from inference.api.common import limits
from inference.generation import GenerationJob
from inference.pool import get_pool
from tests.support.chat_page import SYSTEM, assert_stopped, open_page, run, stats, stop_answer, text_parts
from tests.support.chat_page import chat, chat_models  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

LONG = "Tell me a very long story."  # greedy, the tiny model repeats itself for all of 3000 tokens


def api_answer(messages, max_tokens=8, **extra):
    async def go():
        body = {"model": "tiny", "messages": messages, "temperature": 0, "max_tokens": max_tokens, **extra}
        response = await AsyncClient().post(
            "/v1/chat/completions", json.dumps(body), content_type="application/json"
        )
        return json.loads(response.content)

    return run(go())


def test_answer_streams_and_reports_hot_cold_computed(chat):
    async def go():
        page = await open_page()
        await page.send(message="<b>hi</b> & bye")
        fragments = await page.until(r'id="answer-1-stats"[^>]*data-prompt')
        await page.until(r'id="chat-controls"')
        assert "&lt;b&gt;hi&lt;/b&gt; &amp; bye" in fragments[0]  # the user's text, escaped
        parts = text_parts(fragments, 1)
        first = stats(fragments[-1])
        await page.send(action="new")
        await page.until(r'id="chat-controls"')
        await page.send(message="<b>hi</b> & bye")
        again = stats((await page.until(r'id="answer-2-stats"[^>]*data-prompt'))[-1])
        await page.comm.disconnect()
        return fragments, parts, first, again

    fragments, parts, first, again = run(go())
    assert len(parts) >= 3  # the answer grew over several websocket messages
    assert first["generated"] == 8 and first["hot"] == first["cold"] == 0
    assert first["computed"] == first["prompt"] > 20
    # the same conversation again, in a new chat: its prompt comes from the hot tier
    assert again["prompt"] == first["prompt"] and again["hot"] > 0
    assert again["hot"] + again["cold"] + again["computed"] == again["prompt"]
    # the websocket's answer is the API's answer for the same messages (one path)
    reply = api_answer(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "<b>hi</b> & bye"}]
    )
    assert "".join(parts) == reply["choices"][0]["message"]["content"]
    assert "TTFT" in fragments[-1] and "tokens/s" in fragments[-1]


def test_console_chats_share_no_cached_blocks_with_api_clients(chat):
    """The console's chat has its own cache salt: an API client asking what the console asked
    learns nothing from cached_tokens, whatever cache_salt it names."""

    async def go():
        page = await open_page()
        await page.send(message="a secret question")
        fragments = await page.until(r'id="answer-1-stats"[^>]*data-prompt')
        await page.comm.disconnect()
        return stats(fragments[-1])

    console = run(go())
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "a secret question"}]
    for salt in ({}, {"cache_salt": "console"}):
        reply = api_answer(messages, **salt)
        assert reply["usage"]["prompt_tokens"] == console["prompt"]
        assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, salt


def test_conversation_history_goes_into_the_next_prompt(chat):
    async def go():
        page = await open_page()
        await page.send(message="first question")
        one = await page.until(r'id="answer-1-stats"[^>]*data-prompt')
        await page.send(message="second question")
        two = await page.until(r'id="answer-2-stats"[^>]*data-prompt')
        await page.comm.disconnect()
        return one, two

    one, two = run(go())
    answer = "".join(text_parts(one, 1))
    first, second = stats(one[-1]), stats(two[-1])
    reply = api_answer(
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "second question"},
        ]
    )
    assert second["prompt"] == reply["usage"]["prompt_tokens"] > first["prompt"]
    assert second["hot"] >= 16  # the first turn's prompt was computed once


def test_reasoning_is_shown_apart(chat):
    async def go():
        page = await open_page()
        await page.send(model="thinker", max_tokens="6")
        fragments = await page.until(r'id="answer-1-stats"[^>]*data-prompt')
        await page.comm.disconnect()
        return fragments

    fragments = run(go())
    assert any('<details id="answer-1-thinking" class="thinking">' in f for f in fragments)
    reasoning = "".join(text_parts(fragments, 1, "reasoning"))
    assert reasoning.strip() and text_parts(fragments, 1) == []  # the qwen3 prompt opens <think>


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"model": "nope"}, "The model &#x27;nope&#x27; cannot be served"),
        ({"model": ""}, "Pick a model."),
        ({"message": "   "}, "The message is empty."),
        ({"temperature": "warm"}, "Temperature: &#x27;warm&#x27; is not a number."),
        ({"temperature": "3"}, "Temperature must be between 0 and 2."),
        ({"max_tokens": "2.5"}, "Max tokens must be a whole number"),
        ({"action": "dance"}, "Unknown action"),
    ],
)
def test_bad_form_values_show_an_error_bubble(chat, fields, message):
    async def go():
        page = await open_page()
        await page.send(**fields)
        fragment = (await page.until(r"chat-notice"))[-1]
        await page.send()  # the socket still works
        await page.until(r'id="answer-1-stats"[^>]*data-prompt')
        await page.comm.disconnect()
        return fragment

    assert message in run(go())


def test_context_overflow_and_429_are_error_bubbles(chat):
    async def go():
        page = await open_page()
        await page.send(system="word " * 5000)
        overflow = (await page.until(r"chat-error"))[-1]
        await page.until(r'id="chat-controls"')
        blocker = GenerationJob("blocker", "tiny", {}, messages=[{"role": "user", "content": "x"}])
        with override_settings(OMLX_MAX_CONCURRENT_REQUESTS=1, OMLX_MAX_QUEUED_REQUESTS=0):
            limits.admit(blocker)  # the model's only slot is taken
            try:
                await page.send()
                busy = (await page.until(r"chat-error", timeout=20))[-1]
                await page.until(r'id="chat-controls"')
            finally:
                limits.release(blocker)
        await page.send(message="after the errors")
        after = (await page.until(r'id="answer-\d+-stats"[^>]*data-prompt'))[-1]
        await page.comm.disconnect()
        return overflow, busy, after

    overflow, busy, after = run(go())
    assert 'data-status="400"' in overflow and "context" in overflow
    assert 'data-status="429"' in busy and "retry later" in busy
    assert stats(after)["prompt"] < 100  # the refused messages did not stay in the conversation


def test_stop_aborts_the_answer(chat):
    async def go():
        page = await open_page()
        await page.send(max_tokens="3000", system="", message=LONG)  # greedy: no end in sight
        return await stop_answer(page, r'<span id="answer-1-text"')

    assert_stopped(*run(go()))


def test_a_closed_socket_aborts_its_answer(chat):
    async def go():
        page = await open_page()
        await page.send(max_tokens="3000", system="", message=LONG)  # greedy: no end in sight
        await page.until(r'<span id="answer-1-text"')
        engine = get_pool().loaded("tiny")
        assert engine.num_active() == 1
        await page.comm.disconnect()
        for _ in range(500):  # the abort reaches the engine thread within a step
            if engine.num_active() == 0:
                break
            await asyncio.sleep(0.02)
        return engine.num_active()

    assert run(go()) == 0
    assert limits.in_flight("tiny") == 0


def test_page_lists_servable_models(chat):
    response = Client().get("/admin/chat/")
    assert response.status_code == 200
    body = response.content.decode()
    assert '<option value="thinker"' in body and '<option value="tiny"' in body
    assert 'ws-connect="/ws/admin/chat/"' in body


def test_model_text_is_escaped():
    from admin_panel.consumers.chat import _append_html, _reasoning_html

    evil = '<img src=x onerror="alert(1)"> & </span><script>x()</script>'
    for fragment in (
        _append_html(3, "text", evil),
        _reasoning_html(3, evil, False),
        _reasoning_html(3, evil, True),
    ):
        assert "<img" not in fragment and "<script" not in fragment and fragment.count("</span>") == 1
        assert text_parts([fragment], 3, "reasoning" if "reasoning" in fragment else "text") == [evil]


def test_parse_form_alias_and_defaults():
    request = parse_form(
        {"model": "alias", "message": "hi", "temperature": "", "max_tokens": " 12 "},
        lambda name: "real" if name == "alias" else None,
    )
    assert (request.model, request.params()) == ("real", {"max_tokens": 12})
    assert request.messages([]) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="not a finite number"):
        parse_form({"model": "x", "message": "hi", "temperature": "nan"}, lambda name: name)
