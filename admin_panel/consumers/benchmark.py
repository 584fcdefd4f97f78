"""The Benchmark page's socket, ``ws/admin/benchmark/<run id>/``: the run's progress and results
so far, then every step as the Huey task publishes it (channel layer group ``omlx.bench.<id>``,
admin_panel/tasks.py), as the fragments #bench-progress and #bench-results; when the run has
ended, its row in the list of runs (#bench-run-<id>) too.

The socket joins the group before it reads the row, so a step published meanwhile arrives twice
rather than never: steps older than what was shown are dropped, and once the final state is
shown (from the row or the "finished" event) nothing else is.
"""

from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async

from . import AdminConsumer


class BenchmarkConsumer(AdminConsumer):
    group = None
    shown_done = -1  # the step count on the page
    final = False  # the final state is on the page

    async def joined(self) -> None:
        from inference.dispatch import relay

        from admin_panel.tasks import group_name

        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = group_name(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        relay.listen_on_loop(self.group, asyncio.get_running_loop())
        messages = await database_sync_to_async(self._render)(None)
        if messages is None:
            await self.send_error(f"Benchmark #{self.run_id} does not exist.")
            await self.close()
            return
        for html in messages:
            await self.send_html(html)

    async def generation_event(self, message) -> None:
        """A step of the run (``inference.dispatch.relay``'s message type)."""
        event = message.get("event") or {}
        if event.get("run") != self.run_id or self.final:
            return
        if event.get("kind") == "progress" and event.get("done", 0) < self.shown_done:
            return
        for html in await database_sync_to_async(self._render)(event) or []:
            await self.send_html(html)

    def _render(self, event):
        """The messages (HTML fragments) of the run's state: from the row, updated by a progress
        ``event`` (the row may lag behind it when the task runs in another process). The table
        row goes alone: a fragment that starts with a <div> cannot hold a <tr>."""
        from django.template.loader import render_to_string

        from admin_panel.models import BenchmarkRun
        from admin_panel.views.benchmark import progress_html, results_html

        run = BenchmarkRun.objects.filter(pk=self.run_id).first()
        if run is None:
            return None
        if event is not None and event.get("kind") == "progress":
            run.status, run.progress_done, run.progress_total = event["status"], event["done"], event["total"]
            run.progress_message, run.results = event["message"], event["results"]
        self.shown_done = max(self.shown_done, run.progress_done)
        messages = [progress_html(run) + results_html(run)]
        if run.status not in BenchmarkRun.ACTIVE:
            self.final = True
            messages.append(
                render_to_string("admin_panel/partials/benchmark_run_row.html", {"run": run, "oob_row": True})
            )
        return messages

    async def disconnect(self, code) -> None:
        if self.group is not None:
            from inference.dispatch import relay

            relay.stop_listening(self.group)
            await self.channel_layer.group_discard(self.group, self.channel_name)
