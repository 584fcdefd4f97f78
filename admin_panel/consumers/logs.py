"""The Logs page's websocket (ws/admin/logs/?file=&lines=&level=&q=, the page's own query): sends
the tail of the log file, then every new line that passes the filter, polling the file
(admin_panel/log_tail.py) twice a second until the socket closes."""

from __future__ import annotations

import asyncio
import logging
from typing import List, Optional
from urllib.parse import parse_qs

from django.template.loader import render_to_string

from admin_panel.log_tail import LogFollower, LogLine, parse_line, tail
from admin_panel.views.logs import read_query

from . import AdminConsumer

logger = logging.getLogger("omlx.admin")

POLL_SECONDS = 0.5


class LogsConsumer(AdminConsumer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.task: Optional[asyncio.Task] = None

    async def joined(self) -> None:
        params = {
            k: v[-1] for k, v in parse_qs(self.scope.get("query_string", b"").decode("latin-1")).items()
        }
        self.query = await asyncio.to_thread(read_query, params)
        if self.query.path is None:
            await self._badge("Logging to a file is off: nothing to follow.")
            return
        lines, follower = await asyncio.to_thread(tail, self.query.path, self.query.lines, self.query.accept)
        await self._rows(lines, append=False)
        await self._badge("Following new lines")
        self.task = asyncio.ensure_future(self._follow(follower))

    async def disconnect(self, code) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _follow(self, follower: LogFollower) -> None:
        try:
            while True:
                await asyncio.sleep(POLL_SECONDS)
                texts = await asyncio.to_thread(follower.read)
                lines = [line for line in map(parse_line, texts) if self.query.accept(line)]
                if lines:
                    await self._rows(lines[-self.query.lines :], append=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("following %s failed", self.query.path)
            await self._badge(f"Following stopped: {exc}", error=True)

    async def _rows(self, lines: List[LogLine], append: bool) -> None:
        await self.send_html(
            render_to_string(
                "admin_panel/partials/logs_rows.html",
                {"log_lines": lines, "append": append, "query": self.query},
            )
        )

    async def _badge(self, text: str, error: bool = False) -> None:
        await self.send_html(
            render_to_string("admin_panel/partials/logs_follow.html", {"text": text, "error": error})
        )
