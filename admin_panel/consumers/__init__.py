"""Websocket consumers of the console's live pages, one module each.

The browser side is htmx's ws extension: the server sends HTML fragments whose top-level elements
carry ids and replace (or, with hx-swap-oob="beforeend", extend) the elements with those ids; a
form with ``ws-send`` sends its fields as one JSON object (plus a "HEADERS" key).
"""

from __future__ import annotations

import asyncio
import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from admin_panel.auth import AUTH_GROUP, is_authenticated, session_is_authenticated

logger = logging.getLogger("omlx.admin")

CLOSE_UNAUTHENTICATED = 4401
AUTH_CHECK_SECONDS = 2.0  # how soon a login ended elsewhere (`omlx keys revoke`) closes the socket


class AdminConsumer(AsyncWebsocketConsumer):
    """Accepts only logged-in sessions (close code 4401 otherwise), and closes (4401) once the
    login ends: checked again before each message, when this server tells the ``AUTH_GROUP`` of
    a logout or a revoked key, and every ``AUTH_CHECK_SECONDS`` (a key revoked by `omlx keys` in
    another process). Subclasses override ``joined()`` (after accept) and ``received(data:
    dict)`` (a ws-send form's JSON)."""

    auth_check_seconds = AUTH_CHECK_SECONDS

    async def connect(self):
        if not await database_sync_to_async(is_authenticated)(self.scope.get("session")):
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        session = self.scope.get("session")
        self._session_key = session.session_key if session is not None else None
        await self.accept()
        if self.channel_layer is not None:
            await self.channel_layer.group_add(AUTH_GROUP, self.channel_name)
            self._in_auth_group = True
        self._auth_watch = asyncio.ensure_future(self._watch_login())
        await self.joined()

    async def still_logged_in(self) -> bool:
        """The login as stored now; False closes the socket (4401)."""
        if await database_sync_to_async(session_is_authenticated)(getattr(self, "_session_key", None)):
            return True
        await self.close(code=CLOSE_UNAUTHENTICATED)
        return False

    async def _watch_login(self) -> None:
        while True:
            await asyncio.sleep(self.auth_check_seconds)
            try:
                if not await self.still_logged_in():
                    return
            except asyncio.CancelledError:
                raise
            except Exception:  # a busy database: check again at the next tick
                logger.warning("checking a websocket's login failed", exc_info=True)

    async def auth_changed(self, event) -> None:
        """A logout or a revoked key on this server (admin_panel/auth.py: notify_auth_changed)."""
        await self.still_logged_in()

    async def websocket_disconnect(self, message):
        watch = getattr(self, "_auth_watch", None)
        if watch is not None:
            watch.cancel()
        if getattr(self, "_in_auth_group", False):
            await self.channel_layer.group_discard(AUTH_GROUP, self.channel_name)
        await super().websocket_disconnect(message)

    async def joined(self) -> None:
        pass

    async def receive(self, text_data=None, bytes_data=None):
        if not await self.still_logged_in():
            return
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
