"""The console's websocket routes (omlx_site/asgi.py serves them with the session attached)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.urls import path

from admin_panel.consumers.benchmark import BenchmarkConsumer
from admin_panel.consumers.chat import ChatConsumer
from admin_panel.consumers.downloads import DownloadsConsumer
from admin_panel.consumers.logs import LogsConsumer
from admin_panel.consumers.status import StatusConsumer

websocket_urlpatterns: list = [
    path("ws/admin/status/", StatusConsumer.as_asgi()),
    path("ws/admin/chat/", ChatConsumer.as_asgi()),
    path("ws/admin/logs/", LogsConsumer.as_asgi()),
    path("ws/admin/downloads/", DownloadsConsumer.as_asgi()),
    path("ws/admin/benchmark/<int:run_id>/", BenchmarkConsumer.as_asgi()),
]


class SameOriginWebsocket:
    """Refuses a websocket whose Origin header names another host than the one it was opened on:
    a page of another site (or a sandboxed frame, Origin "null") must not use the console's login
    cookie. Clients without an Origin (not a browser) pass; the consumer still checks the login."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        if origin and urlsplit(origin).netloc.lower() != host.lower():
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 4403})
            return
        return await self.app(scope, receive, send)
