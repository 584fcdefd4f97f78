"""The Benchmark page's socket, ``ws/admin/benchmark/<run id>/``: the run's progress and results
so far, then every step as the Huey task publishes it (channel layer group ``omlx.bench.<id>``,
admin_panel/tasks.py), as the fragments #bench-progress and #bench-results; when the run ends,
the list of runs (#bench-runs) too."""
from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async

from . import AdminConsumer


class BenchmarkConsumer(AdminConsumer):
    group = None

    async def joined(self) -> None:
        from inference import relay

        from admin_panel.tasks import group_name

        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = group_name(self.run_id)
        # Join before reading the row: a step published in between is then sent twice, never lost.
        await self.channel_layer.group_add(self.group, self.channel_name)
        relay.listen_on_loop(self.group, asyncio.get_running_loop())
        html = await database_sync_to_async(self._current)()
        if html is None:
            await self.send_error(f"Benchmark #{self.run_id} does not exist.")
            await self.close()
            return
        await self.send_html(html)

    def _current(self):
        from admin_panel.models import BenchmarkRun
        from admin_panel.views.benchmark import progress_html, results_html

        run = BenchmarkRun.objects.filter(pk=self.run_id).first()
        return None if run is None else progress_html(run) + results_html(run)

    async def generation_event(self, message) -> None:
        """A step of the run (``inference.relay``'s message type)."""
        event = message.get("event") or {}
        if event.get("run") != self.run_id:
            return
        html = await database_sync_to_async(self._render)(event)
        if html:
            await self.send_html(html)

    def _render(self, event: dict) -> str:
        from admin_panel.models import BenchmarkRun
        from admin_panel.views.benchmark import progress_html, results_html, runs_html

        run = BenchmarkRun.objects.filter(pk=self.run_id).first()
        if run is None:
            return ""
        if event.get("kind") == "progress":  # the row may lag behind the event (another process)
            run.status, run.progress_done, run.progress_total = event["status"], event["done"], event["total"]
            run.progress_message, run.results = event["message"], event["results"]
            return progress_html(run) + results_html(run)
        return progress_html(run) + results_html(run) + runs_html(oob=True)

    async def disconnect(self, code) -> None:
        if self.group is not None:
            from inference import relay

            relay.stop_listening(self.group)
            await self.channel_layer.group_discard(self.group, self.channel_name)
