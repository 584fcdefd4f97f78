"""ws/admin/downloads/: pushes the Downloads page's list (#downloads-list) whenever a download
changes (started, a step of progress, finished, failed, cancelled): it waits on
``Downloads.version`` (admin_panel/downloads.py), which every change bumps."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.template.loader import render_to_string

from admin_panel.consumers import AdminConsumer

logger = logging.getLogger("omlx.admin")

WAIT_SECONDS = 5.0  # longest wait for a change (then the list is sent anyway: staging folders)


def render_list() -> str:
    from admin_panel.views.downloads import list_context

    return render_to_string("admin_panel/partials/downloads_list.html", list_context([]))


class DownloadsConsumer(AdminConsumer):
    async def joined(self) -> None:
        self._pusher = asyncio.ensure_future(self._push())

    async def disconnect(self, code) -> None:
        pusher = getattr(self, "_pusher", None)
        if pusher is not None:
            pusher.cancel()

    async def _push(self) -> None:
        from admin_panel.downloads import get_downloads

        downloads = get_downloads()
        version = downloads.version
        while True:
            try:
                await self.send_html(await sync_to_async(render_list, thread_sensitive=False)())
                version = await sync_to_async(downloads.wait_change, thread_sensitive=False)(
                    version, WAIT_SECONDS
                )
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed update must not end the page's updates
                logger.exception("rendering the downloads list failed")
                await asyncio.sleep(WAIT_SECONDS)
