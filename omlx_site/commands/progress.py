"""Progress displays of the command line: `omlx pull`'s bytes (a bar redrawn in place on a terminal,
plain lines otherwise) and `omlx bench`'s steps."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from inference.hub import HubFile, Progress, Snapshot

from .common import human_bytes

_REDRAW_EVERY = 0.1  # seconds between redraws of the bar
_BAR = 24


class PullProgress(Progress):
    """One line for the file being downloaded and the whole pull. On a terminal it is redrawn
    in place; elsewhere (a log, a pipe) a line is printed per file started and finished."""

    def __init__(self, stream=None, tty=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = self.done = 0
        self.file = None
        self.file_done_bytes = 0
        self.files_done = 0
        self.count = 0
        self._drawn = 0.0
        self._started = time.monotonic()
        self._start_done = 0

    def start(self, snapshot: Snapshot, done_bytes: int) -> None:
        self.total, self.done, self._start_done = snapshot.total_bytes, done_bytes, done_bytes
        self.count = len(snapshot.files)
        resumed = f", {human_bytes(done_bytes)} already here" if done_bytes else ""
        self._line(
            f"pulling {snapshot.repo} at {snapshot.commit}: {self.count} files, "
            f"{human_bytes(self.total)}{resumed}"
        )

    def file_start(self, file: HubFile, done_bytes: int) -> None:
        self.file, self.file_done_bytes = file, done_bytes
        if not self.tty:
            resume = f" (resuming at {human_bytes(done_bytes)})" if done_bytes else ""
            self._line(f"  {file.path}: {human_bytes(file.size)}{resume}")
        self._draw(force=True)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        self.file_done_bytes += nbytes
        self._draw()

    def rewind(self, nbytes: int) -> None:
        self.done -= nbytes
        self.file_done_bytes = max(0, self.file_done_bytes - nbytes)

    def file_done(self, file: HubFile) -> None:
        self.files_done += 1
        if self.tty:
            self._draw(force=True)
        else:
            self._line(
                f"  {file.path}: done [{self.files_done}/{self.count} files, "
                f"{self._percent(self.done, self.total)} of {human_bytes(self.total)}]"
            )

    def finish(self, path: Path) -> None:
        self._line(f"{self.count} files, {human_bytes(self.total)}: complete")

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.tty or (not force and now - self._drawn < _REDRAW_EVERY) or self.file is None:
            return
        self._drawn = now
        size = self.file.size or 0
        fraction = self.file_done_bytes / size if size else 1.0
        filled = int(_BAR * min(1.0, fraction))
        elapsed = now - self._started
        speed = (self.done - self._start_done) / elapsed if elapsed > 0 else 0.0
        text = (
            f"{self.file.path} [{'#' * filled}{'.' * (_BAR - filled)}] {fraction:4.0%} "
            f"{human_bytes(self.file_done_bytes)}/{human_bytes(size)} | total "
            f"{self._percent(self.done, self.total)} {human_bytes(self.done)}/{human_bytes(self.total)} "
            f"{human_bytes(speed)}/s"
        )
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()

    def _line(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    @staticmethod
    def _percent(done: int, total: int) -> str:
        return f"{done / total:.0%}" if total else "100%"


class StepProgress:
    """A bar of steps (`omlx bench`): ``update(done, total, message)`` redraws it in place on a
    terminal; elsewhere (a log, a pipe) a line is printed per step."""

    def __init__(self, stream=None, tty=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._started = time.monotonic()
        self._open = False

    def update(self, done: int, total: int, message: str) -> None:
        fraction = done / total if total else 1.0
        filled = int(_BAR * min(1.0, fraction))
        text = (
            f"[{'#' * filled}{'.' * (_BAR - filled)}] {done}/{total} {message} "
            f"({time.monotonic() - self._started:.1f} s)"
        )
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
            self._open = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line (before other output)."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
