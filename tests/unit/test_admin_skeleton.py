"""The console's frame: login with the API key, CSRF, static files, websocket checks, SVG charts."""

import re

import pytest
from django.test import Client, override_settings

from admin_panel import charts

pytestmark = pytest.mark.django_db(transaction=True)


# -- login ----------------------------------------------------------------------------------------


@pytest.fixture
def keyed():
    with override_settings(OMLX_API_KEY="s3cret"):
        yield


def test_without_a_key_the_console_is_open():
    with override_settings(OMLX_API_KEY=None):
        response = Client().get("/admin/")
        assert response.status_code == 302 and response["Location"] == "/admin/status/"
        assert Client().get("/admin/login/")["Location"] == "/admin/"


def test_a_key_sends_to_the_login_page(keyed):
    client = Client()
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=%2Fadmin%2F"
    page = client.get(response["Location"])
    assert page.status_code == 200 and b'name="api_key"' in page.content
    htmx = client.get("/admin/", HTTP_HX_REQUEST="true")
    assert htmx.status_code == 401 and htmx["HX-Redirect"].startswith("/admin/login/")


def test_login_with_the_right_key_only(keyed):
    client = Client(enforce_csrf_checks=True)
    page = client.get("/admin/login/?next=/admin/models/")
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content).group(1).decode()
    wrong = client.post(
        "/admin/login/", {"api_key": "nope", "next": "/admin/models/", "csrfmiddlewaretoken": token}
    )
    assert wrong.status_code == 401 and b"not the server&#x27;s API key" in wrong.content
    right = client.post(
        "/admin/login/", {"api_key": "s3cret", "next": "/admin/models/", "csrfmiddlewaretoken": token}
    )
    assert right.status_code == 302 and right["Location"] == "/admin/models/"
    assert client.get("/admin/")["Location"] == "/admin/status/"
    # A new key (a restart with another --api-key) ends the login.
    with override_settings(OMLX_API_KEY="other"):
        assert client.get("/admin/")["Location"].startswith("/admin/login/")


def test_login_needs_csrf_and_refuses_foreign_next(keyed):
    client = Client(enforce_csrf_checks=True)
    assert client.post("/admin/login/", {"api_key": "s3cret"}).status_code == 403
    client = Client()
    response = client.post("/admin/login/", {"api_key": "s3cret", "next": "https://evil.example/"})
    assert response["Location"] == "/admin/"


def test_logout_ends_the_session(keyed):
    client = Client()
    client.post("/admin/login/", {"api_key": "s3cret"})
    assert client.get("/admin/")["Location"] == "/admin/status/"
    assert client.post("/admin/logout/").status_code == 302
    assert client.get("/admin/")["Location"].startswith("/admin/login/")
    assert client.get("/admin/logout/").status_code == 405


def test_the_api_keeps_no_csrf_check():
    # The console's CSRF protection is per view: the /v1 API (bearer keys) must not need a token.
    with override_settings(OMLX_API_KEY=None):
        response = Client(enforce_csrf_checks=True).post(
            "/v1/chat/completions", data="{}", content_type="application/json"
        )
    assert response.status_code == 400


# -- static files ---------------------------------------------------------------------------------


def test_static_files_are_served_from_the_apps():
    client = Client()
    htmx = client.get("/static/django_htmx/htmx-2.min.js")
    assert htmx.status_code == 200 and "javascript" in htmx["Content-Type"]
    assert b"htmx" in b"".join(htmx.streaming_content)
    assert client.get("/static/django_htmx/ext/hx-ws-2.min.js").status_code == 200
    css = client.get("/static/admin_panel/admin.css")
    assert css.status_code == 200 and css["Content-Type"].startswith("text/css")
    assert client.get("/static/../omlx_site/settings.py").status_code == 404
    assert client.get("/static/admin_panel/nothing.css").status_code == 404


# -- websockets -----------------------------------------------------------------------------------


def _app():
    from channels.routing import URLRouter
    from channels.sessions import SessionMiddlewareStack
    from django.urls import path

    from admin_panel.consumers import AdminConsumer
    from omlx_site.boundary import BrowserBoundary

    class Echo(AdminConsumer):
        async def joined(self):
            await self.send_html('<div id="hello">hi</div>')

        async def received(self, data):
            await self.send_html(f'<div id="echo">{sorted(data)}</div>')

    return BrowserBoundary(SessionMiddlewareStack(URLRouter([path("ws/test/", Echo.as_asgi())])))


async def _connect(headers):
    from channels.testing import WebsocketCommunicator

    comm = WebsocketCommunicator(_app(), "/ws/test/", headers=headers)
    connected, code = await comm.connect()
    return comm, connected, code


def test_websocket_refuses_other_origins_and_strangers():
    import asyncio

    asyncio.run(_websocket_checks())


async def _websocket_checks():
    with override_settings(OMLX_API_KEY=None):
        comm, connected, code = await _connect(
            [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://evil.example")]
        )
        assert not connected and code == 4403
        comm, connected, code = await _connect([(b"host", b"127.0.0.1:8000"), (b"origin", b"null")])
        assert not connected and code == 4403
        comm, connected, _ = await _connect(
            [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000")]
        )
        assert connected
        assert await comm.receive_from() == '<div id="hello">hi</div>'
        await comm.send_to(text_data='{"message": "x", "HEADERS": {"HX-Request": "true"}}')
        assert await comm.receive_from() == "<div id=\"echo\">['message']</div>"
        await comm.send_to(text_data="not json")
        assert "not JSON" in await comm.receive_from()
        await comm.disconnect()
    with override_settings(OMLX_API_KEY="s3cret"):
        comm, connected, code = await _connect([(b"host", b"127.0.0.1:8000")])
        assert not connected and code == 4401


# -- charts ---------------------------------------------------------------------------------------


def test_line_chart_draws_points_gaps_and_escapes():
    svg = charts.line_chart(
        [("tok/s <a>", [(1, 2.0), (2, None), (3, 4.0), (4, 5.0)]), ("ttft", [(1, 1.0)])],
        title="Speed & <b>",
        y_label="tokens/s",
    )
    assert svg.startswith('<svg class="chart"') and svg.endswith("</svg>")
    assert 'data-points="4"' in svg
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "&lt;a&gt;" in svg
    assert svg.count("<polyline") == 1  # (3, 4) - (4, 5); the gap splits the first series
    assert svg.count("<circle") == 4


def test_line_chart_time_axis_and_empty():
    import time

    now = time.time()
    svg = charts.line_chart([("rss", [(now - 600, 1e9), (now, 1.5e9)])])
    assert re.search(r">\d\d:\d\d<", svg) and "1.5G" in svg
    empty = charts.line_chart([("x", [])], title="nothing")
    assert 'data-points="0"' in empty and "no data yet" in empty


def test_bar_chart_groups():
    svg = charts.bar_chart(["1", "2", "4"], [("cold", [10, 20, None]), ("cached", [1, 2, 3])], title="TTFT")
    assert 'data-points="5"' in svg and svg.count("<rect") == 5 + 2  # bars + legend swatches


def test_nice_ticks_cover_the_range():
    for low, high in [(0, 1), (0, 7.3), (0, 1234), (3, 3), (0.001, 0.0042)]:
        ticks = charts.nice_ticks(low, high)
        assert ticks[0] <= low and ticks[-1] >= high and len(ticks) >= 2
    assert charts.compact(1234) == "1.23k" and charts.compact(0) == "0"


def test_secret_key_is_made_once_and_private(tmp_path):
    from omlx_site import secret_key

    first = secret_key.load(tmp_path)
    assert len(first) >= 32 and (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert secret_key.load(tmp_path) == first  # a restart keeps the logins
    (tmp_path / "other").mkdir()
    assert secret_key.load(tmp_path / "other") != first  # one key per OMLX_HOME
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".secret_key")]
