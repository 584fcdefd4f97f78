"""The Logs page in process: the view (tail, filters, bad values, a missing file) and its websocket
(admin_panel/consumers/logs.py) following a real file. log_tail itself: tests/unit/test_log_tail.py."""

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db(transaction=True)


def line(i, level="INFO", message=None, **extra):
    return (
        json.dumps(
            {
                "time": f"2026-11-29T20:00:{i:02d}.000Z",
                "level": level,
                "logger": "omlx.api",
                "message": message or f"request {i}",
                "pid": 7,
                **extra,
            }
        )
        + "\n"
    )


@pytest.fixture
def log_dir(tmp_path):
    with override_settings(OMLX_LOG_DIR=tmp_path, OMLX_API_KEY=None):
        yield tmp_path


def get(query=""):
    response = Client().get("/admin/logs/" + query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_page_without_a_log_file(log_dir):
    body = get()
    assert "does not exist yet" in body and str(log_dir / "server.log") in body
    with override_settings(OMLX_LOG_DIR=None):
        assert "Logging to a file is off" in get()


def test_tail_filters_and_escaping(log_dir):
    (log_dir / "server.log").write_text(
        "".join(line(i) for i in range(10))
        + line(10, "WARNING", "slow <b>disk</b>", model="tiny")
        + "a line that is not JSON\n"
        + line(11, "ERROR", "failed", exception="Traceback (most recent call last)")
    )
    body = get()
    assert body.count('<tr class="line') == 13
    assert "slow &lt;b&gt;disk&lt;/b&gt;" in body and "<b>disk" not in body
    assert '<tr class="line raw"><td colspan="5">a line that is not JSON</td></tr>' in body
    assert "model=<code>tiny</code>" in body and "<pre>Traceback (most recent call last)</pre>" in body
    assert get("?lines=3").count('<tr class="line') == 3
    warnings = get("?level=warning")
    assert warnings.count('<tr class="line') == 2 and "request 3" not in warnings
    assert get("?q=DISK").count('<tr class="line') == 1
    htmx = Client().get("/admin/logs/?level=ERROR", HTTP_HX_REQUEST="true").content.decode()
    assert htmx.startswith('<div id="log-view">') and htmx.count('<tr class="line') == 1


def test_follow_is_on_until_the_form_turns_it_off(log_dir):
    (log_dir / "server.log").write_text(line(1))
    assert 'ws-connect="/ws/admin/logs/?file=server.log&amp;lines=200&amp;level=&amp;q="' in get()
    assert "ws-connect" not in get("?lines=200&level=")  # the form sent without "follow"
    assert 'ws-connect="/ws/admin/logs/?file=server.log&amp;lines=20&amp;level=ERROR&amp;q=x"' in get(
        "?lines=20&level=error&q=x&follow=on"
    )


@pytest.mark.parametrize(
    "query, message",
    [
        ("?lines=abc", "Lines must be a whole number from 1 to 5000"),
        ("?lines=0", "Lines must be a whole number from 1 to 5000"),
        ("?level=LOUD", "Unknown level &#x27;LOUD&#x27;"),
        ("?file=../../etc/passwd", "There is no log file &#x27;../../etc/passwd&#x27;"),
    ],
)
def test_bad_values_show_a_message(log_dir, query, message):
    (log_dir / "server.log").write_text(line(1))
    body = get(query)
    assert message in body and '<tr class="line' in body  # the defaults are shown


def test_worker_log_files_can_be_picked(log_dir):
    (log_dir / "server.log").write_text(line(1))
    (log_dir / "worker-42.log").write_text(line(2, message="from the worker"))
    body = get("?file=worker-42.log")
    assert "from the worker" in body and "request 1" not in body
    assert "<option selected>worker-42.log</option>" in body


async def follow(query, log_file, writes):
    """Connect the page's websocket, then append ``writes`` one by one; the fragments received."""
    from omlx_site.asgi import application

    comm = WebsocketCommunicator(application, "/ws/admin/logs/" + query)
    connected, _ = await comm.connect()
    assert connected
    got = [await comm.receive_from(10), await comm.receive_from(10)]  # the tail, then "following"
    for text in writes:
        with open(log_file, "a") as f:
            f.write(text)
        if text.endswith("\n"):
            got.append(await comm.receive_from(10))
    await comm.disconnect()
    return got


def test_follow_pushes_new_lines(log_dir):
    log_file = log_dir / "server.log"
    log_file.write_text(line(1) + line(2, "DEBUG"))
    got = asyncio.run(
        follow(
            "?level=INFO&lines=50",
            log_file,
            [line(3), line(4, "DEBUG") + line(5, "ERROR", "bad <thing>"), line(6)[:30], line(6)[30:]],
        )
    )
    tail, badge, *pushed = got
    assert tail.startswith('<tbody id="log-rows" data-max="50">') and tail.count('<tr class="line') == 1
    assert 'id="log-follow"' in badge
    assert all('hx-swap-oob="beforeend"' in p for p in pushed)
    assert "request 3" in pushed[0]
    assert "request 4" not in pushed[1] and "bad &lt;thing&gt;" in pushed[1]  # DEBUG filtered out
    assert "request 6" in pushed[2] and pushed[2].count('<tr class="line') == 1  # once, when complete


def test_follow_waits_for_the_file(log_dir):
    got = asyncio.run(follow("", log_dir / "server.log", [line(1)]))
    assert got[0].count('<tr class="line') == 0 and "request 1" in got[2]
