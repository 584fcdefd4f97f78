"""Websocket consumers of the console's live pages, one module each.

The browser side is htmx's ws extension: the server sends HTML fragments whose top-level elements
carry ids and replace (or, with hx-swap-oob="beforeend", extend) the elements with those ids; a
form with ``ws-send`` sends its fields as one JSON object (plus a "HEADERS" key).
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from admin_panel.auth import is_authenticated

logger = logging.getLogger("omlx.admin")

CLOSE_UNAUTHENTICATED = 4401


class AdminConsumer(AsyncWebsocketConsumer):
    """Accepts only logged-in sessions (close code 4401 otherwise). Subclasses override
    ``joined()`` (after accept) and ``received(data: dict)`` (a ws-send form's JSON)."""

    async def connect(self):
        if not await database_sync_to_async(is_authenticated)(self.scope.get("session")):
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.accept()
        await self.joined()

    async def joined(self) -> None:
        pass

    async def receive(self, text_data=None, bytes_data=None):
        try:
            data = json.loads(text_data or "{}")
        except ValueError:
            await self.send_error("The page sent a message that is not JSON.")
            return
        if not isinstance(data, dict):
            await self.send_error("The page sent a message that is not a JSON object.")
            return
        data.pop("HEADERS", None)
        await self.received(data)

    async def received(self, data: dict) -> None:
        pass

    async def send_html(self, html: str) -> None:
        await self.send(text_data=str(html))

    async def send_error(self, message: str) -> None:
        """Shows ``message`` in the page's #ws-error element (base.html)."""
        from django.utils.html import format_html

        await self.send_html(format_html('<div id="ws-error" class="error">{}</div>', message))
