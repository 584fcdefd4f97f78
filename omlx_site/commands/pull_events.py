"""`omlx pull --progress json`: the pull's progress as one JSON object per line on stdout, for
programs that run the command (the console's Downloads page, admin_panel/downloads.py).

Events (``event`` names each): ``start`` (repo, commit, files, total and done bytes: done > 0 when
a pull resumes), ``file`` (path, size, done: the bytes of it already here), ``progress`` (done, at
most every PROGRESS_EVERY seconds), ``file_done`` (path, done), ``finish`` (path of the folder).
Errors go to stderr as without the flag; the exit code says how it ended.

Invariant: the bytes that arrived are reported within PROGRESS_EVERY seconds, even when nothing
follows them (a hub that stalls after a chunk): a progress event held back by the rate limit is
sent by a timer, never dropped.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from inference.hub import HubFile, Progress, Snapshot

PROGRESS_EVERY = 0.2  # seconds


class JsonProgress(Progress):
    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.done = 0
        self._sent = 0.0
        self._reported = None  # ``done`` as the last event told it
        self._timer = None
        self._lock = threading.Lock()  # the timer's thread writes events too

    def start(self, snapshot: Snapshot, done_bytes: int) -> None:
        self.done = done_bytes
        self._emit(
            "start",
            repo=snapshot.repo,
            commit=snapshot.commit,
            files=len(snapshot.files),
            total=snapshot.total_bytes,
            done=done_bytes,
        )

    def file_start(self, file: HubFile, done_bytes: int) -> None:
        self._emit("file", path=file.path, size=file.size, done=self.done)

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            wait = PROGRESS_EVERY - (time.monotonic() - self._sent)
            if wait <= 0:
                self._write("progress", done=self.done)
            elif self._timer is None:
                # Held back, not dropped: huggingface_hub reports a whole 10 MiB chunk at a time,
                # and the next report may be minutes away (or never, when the hub stalls).
                self._timer = threading.Timer(wait, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def rewind(self, nbytes: int) -> None:
        self.done -= nbytes
        self._emit("progress", done=self.done)

    def file_done(self, file: HubFile) -> None:
        self._emit("file_done", path=file.path, done=self.done)

    def finish(self, path: Path) -> None:
        self._emit("finish", path=str(path), done=self.done)

    def close(self) -> None:
        """Send what is held back and stop the timer (before the process exits: a daemon thread
        writing to stdout during interpreter shutdown may abort it)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._reported != self.done:
                self._write("progress", done=self.done)

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._reported != self.done:
                self._write("progress", done=self.done)

    def _emit(self, event: str, **fields) -> None:
        with self._lock:
            self._write(event, **fields)

    def _write(self, event: str, **fields) -> None:
        self._sent = time.monotonic()
        self._reported = fields.get("done")
        self.stream.write(json.dumps({"event": event, **fields}) + "\n")
        self.stream.flush()
