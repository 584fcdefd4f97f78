"""`omlx pull --progress json`: the pull's progress as one JSON object per line on stdout, for
programs that run the command (the console's Downloads page, admin_panel/downloads.py).

Events (``event`` names each): ``start`` (repo, commit, files, total and done bytes: done > 0 when
a pull resumes), ``file`` (path, size, done: the bytes of it already here), ``progress`` (done, at
most every PROGRESS_EVERY seconds), ``file_done`` (path, done), ``finish`` (path of the folder).
Errors go to stderr as without the flag; the exit code says how it ended.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from inference.hub import HubFile, Progress, Snapshot

PROGRESS_EVERY = 0.2  # seconds


class JsonProgress(Progress):
    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.done = 0
        self._sent = 0.0

    def start(self, snapshot: Snapshot, done_bytes: int) -> None:
        self.done = done_bytes
        self._emit("start", repo=snapshot.repo, commit=snapshot.commit, files=len(snapshot.files),
                   total=snapshot.total_bytes, done=done_bytes)

    def file_start(self, file: HubFile, done_bytes: int) -> None:
        self._emit("file", path=file.path, size=file.size, done=self.done)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        if time.monotonic() - self._sent >= PROGRESS_EVERY:
            self._emit("progress", done=self.done)

    def rewind(self, nbytes: int) -> None:
        self.done -= nbytes
        self._emit("progress", done=self.done)

    def file_done(self, file: HubFile) -> None:
        self._emit("file_done", path=file.path, done=self.done)

    def finish(self, path: Path) -> None:
        self._emit("finish", path=str(path), done=self.done)

    def _emit(self, event: str, **fields) -> None:
        self._sent = time.monotonic()
        self.stream.write(json.dumps({"event": event, **fields}) + "\n")
        self.stream.flush()
