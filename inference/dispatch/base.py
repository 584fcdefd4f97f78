"""The interface every dispatch backend implements (``inference.dispatch.get_backend`` picks one)."""

from __future__ import annotations

from .errors import NoWorker  # noqa: F401 (where the dispatch backends and the API import it)


class DispatchBackend:
    """How an admitted job reaches the engine that runs it, and how it is aborted. One instance
    per process, chosen from settings at start. Every backend runs ``inference.generation.run_job``
    in the end; only the hop differs.

    ``networked``: ``available``, ``submit`` and ``abort`` do network I/O (call them off the event
    loop). ``runs_models``: whether this process runs inference (loads models, pinned models
    first, watches its memory), else only other processes do.
    """

    name = ""
    networked = False
    runs_models = True

    def available(self) -> None:
        """Raise ``NoWorker`` when no worker would take a job now (may block: Redis)."""
        raise NotImplementedError

    async def submit(self, job) -> None:
        """Hand an admitted ``GenerationJob`` to a worker."""
        raise NotImplementedError

    def abort(self, job) -> None:
        """Abort every choice of ``job`` (synchronous: called while the view is being cancelled)."""
        raise NotImplementedError

    # -- the process's life (omlx_site/server.py, the Huey consumer's hooks in inference.tasks) --

    def start_consumer(self):
        """Start the workers that run in this server process; the consumer to stop, or None."""
        return None

    def worker_started(self) -> None:
        """A worker thread of a Huey consumer starts (any process)."""

    def worker_stopped(self) -> None:
        """The consumer of this process stops."""

    def close(self) -> None:
        """The server stops: send what is left of the events this process published."""
        from . import relay

        relay.flush(5.0)
