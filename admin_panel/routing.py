"""The console's websocket routes (omlx_site/asgi.py serves them with the session attached, behind
the browser boundary of omlx_site/boundary.py: a handshake from another site's page is refused)."""

from __future__ import annotations

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
