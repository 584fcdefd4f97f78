"""The Status page in process: the page with its cards and charts, and the websocket that keeps
them current (Django's test client, Channels' communicator; the real pool and history)."""

import asyncio
import re
import shutil

import pytest
from django.test import Client, override_settings

from admin_panel.history import get_history
from inference.pool import close_pool, get_pool

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def served(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("status-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    with override_settings(
        OMLX_MODEL_DIR=models, OMLX_MODEL_DIRS=[models], OMLX_API_KEY=None, OMLX_API_HANDOFF="direct"
    ):
        yield get_pool()
    close_pool()


def test_the_page_shows_cards_and_charts(served):
    served.engine("tiny")  # loaded
    get_history().sample()
    page = Client().get("/admin/status/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'ws-connect="/ws/admin/status/"' in html
    assert re.search(r'id="status-loaded-count">1<', html)
    assert '<span class="model-id">tiny</span>' in html
    assert 'id="status-memory-bar" style="width:' in html
    assert html.count('<svg class="chart"') == 6
    for title in ("Memory", "Requests", "Tokens per second", "Time to first token", "Cache hit rate"):
        assert f"<title>{title}" in html
    assert Client().get("/admin/")["Location"] == "/admin/status/"


def test_speculative_decoding_shows_on_the_page_and_in_metrics(served):
    """A model's acceptance rate and tokens per verify pass: on its line of the Loaded models
    card, and as counters in /metrics."""
    from inference.engine import SamplingParams

    engine = served.engine("tiny")
    engine.call(lambda e: setattr(e.runner.speculation, "costs", None))  # it speculates, whatever it costs
    params = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True, speculative="lookup")
    list(engine.submit([20, 21, 22, 23, 20, 21, 22, 23, 20], params))
    counts = engine.stats().speculative
    assert counts["verify_passes"] > 0
    html = Client().get("/admin/status/").content.decode()
    assert re.search(r'class="muted speculation">speculative: [0-9.]+% accepted, [0-9.]+ tokens/pass<', html)
    text = Client().get("/metrics").content.decode()
    assert f'omlx_speculative_verify_passes_total{{model="tiny"}} {float(counts["verify_passes"])}' in text


def test_the_page_needs_a_login(served):
    with override_settings(OMLX_API_KEY="k"):
        response = Client().get("/admin/status/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_websocket_pushes_cards_then_new_charts(served, monkeypatch):
    from admin_panel.consumers.status import StatusConsumer

    monkeypatch.setattr(StatusConsumer, "push_seconds", 0.05)  # a setting, not a stand-in
    asyncio.run(_websocket(served))


def _charts_at(message):
    return re.search(r'id="status-charts"[^>]* data-at="([^"]*)"', message).group(1)


async def _websocket(pool):
    from channels.testing import WebsocketCommunicator

    from admin_panel.consumers.status import StatusConsumer
    from omlx_site.boundary import BrowserBoundary
    from channels.routing import URLRouter
    from channels.sessions import SessionMiddlewareStack
    from django.urls import path

    routes = URLRouter([path("ws/admin/status/", StatusConsumer.as_asgi())])
    app = BrowserBoundary(SessionMiddlewareStack(routes))
    history = get_history()
    history.sample()
    comm = WebsocketCommunicator(app, "/ws/admin/status/")
    connected, _ = await comm.connect()
    assert connected
    first = await comm.receive_from(timeout=30)
    assert first.startswith('<div id="status-cards"') and 'id="status-charts"' in first  # charts once
    # Then cards alone until a new point: the history's own sampler may take one between two pushes
    # (every 5 s, or later on a loaded machine), so a push with charts is allowed, but only with a
    # point not sent before; the test waits for a push of cards alone.
    sent_at = {_charts_at(first)}
    for _ in range(50):
        message = await comm.receive_from(timeout=30)
        assert 'id="status-cards"' in message
        if 'id="status-charts"' not in message:
            break
        assert _charts_at(message) not in sent_at  # charts again only for a new point
        sent_at.add(_charts_at(message))
    assert 'id="status-charts"' not in message
    await asyncio.to_thread(pool.engine, "tiny")
    await asyncio.to_thread(history.sample)
    # New charts come with the next push after a new point; a point the history's own sampler
    # took before the model was loaded (a loaded machine) may come first, so the test waits for
    # the charts that come with the loaded model.
    for _ in range(50):
        message = await comm.receive_from(timeout=30)
        if 'id="status-charts"' in message and re.search(r'id="status-loaded-count">1<', message):
            break
    assert 'id="status-charts"' in message and re.search(r'id="status-loaded-count">1<', message)
    await comm.disconnect()


def test_charts_share_the_window_and_label_seconds():
    from admin_panel.charts import line_chart
    from admin_panel.views.status import time_labels

    start = 1_800_000_000.0
    labels = time_labels([start, start + 60])
    assert len(labels) == 5 and labels[0][0] == start and labels[-1][0] < start + 60
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", text) for _, text in labels)
    assert all(len(text) == 5 for _, text in time_labels([start, start + 3600]))
    assert time_labels([start]) is None
    # a series measured only at the end still spans the whole window: its point is at the right edge
    svg = line_chart(
        [("x", [(start, None), (start + 60, 1.0)])], x_range=(start, start + 60), width=640, x_labels=labels
    )
    assert re.search(r'<circle cx="628\.0"', svg)  # 640 - the right padding
