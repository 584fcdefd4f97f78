"""OMLX_API_HANDOFF "direct": the view runs the job on a thread of this process, straight to the
engine (no queue; the reference for what the queue costs)."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from .base import DispatchBackend


class DirectBackend(DispatchBackend):
    name = "direct"

    def available(self) -> None:
        return None  # the engines run in this process

    async def submit(self, job) -> None:
        from inference.generation import run_job

        await sync_to_async(run_job, thread_sensitive=False)(job)

    def abort(self, job) -> None:
        from inference.generation import abort_job

        abort_job(job.request_id, job.model, len(job.choice_ids()))
