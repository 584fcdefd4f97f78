"""ws/admin/status/: pushes the Status page's cards every PUSH_SECONDS, and its charts whenever the
history has a new point (htmx's ws extension swaps #status-cards and #status-charts)."""

from __future__ import annotations

import asyncio
import logging
from typing import Optional, Tuple

from asgiref.sync import sync_to_async
from django.template.loader import render_to_string

from admin_panel.consumers import AdminConsumer

logger = logging.getLogger("omlx.admin")

PUSH_SECONDS = 2.0


def render_update(charts_at: Optional[float]) -> Tuple[str, float]:
    """The fragments to send: the cards, and the charts when their last point is not ``charts_at``."""
    from admin_panel.history import get_history
    from admin_panel.views.status import cards_context, charts_context

    history = get_history()
    html = render_to_string("admin_panel/partials/status_cards.html", cards_context(history))
    latest = history.latest()
    if latest is not None and latest.at != charts_at:
        charts = charts_context(history)
        html += render_to_string("admin_panel/partials/status_charts.html", charts)
        charts_at = charts["charts_at"]
    return html, charts_at


class StatusConsumer(AdminConsumer):
    push_seconds = PUSH_SECONDS

    async def joined(self) -> None:
        self._pusher = asyncio.ensure_future(self._push())

    async def disconnect(self, code) -> None:
        pusher = getattr(self, "_pusher", None)
        if pusher is not None:
            pusher.cancel()

    async def _push(self) -> None:
        charts_at = None
        while True:
            try:
                html, charts_at = await sync_to_async(render_update, thread_sensitive=False)(charts_at)
                await self.send_html(html)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed update must not end the page's updates
                logger.exception("rendering the status update failed")
            await asyncio.sleep(self.push_seconds)
