"""Reading the server's JSON-lines log (omlx_site/json_log.py) for the Logs page: the last lines of
a file and of its rotated predecessors (``tail``), then the lines written since (``LogFollower``).

Only complete lines are read: a line whose newline has not been written yet is left for the next
read. A log file is rotated by renaming it (server.log -> server.log.1) and starting a new one, and
may be truncated by hand; the follower notices both by the file's identity (device and inode) and
its size, and reads the rest of the renamed file before starting on the new one.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_BLOCK = 64 * 1024
MAX_READ_BYTES = 4 * 2**20  # per follower read: a burst is delivered over several reads
MAX_SCAN_LINES = 50_000  # a filtered tail looks this far back, at most


@dataclass
class LogLine:
    """One line of a log file. ``raw`` is set (and the rest empty) for a line that is not a JSON
    object, e.g. written by hand or by an older version."""

    time: str = ""
    level: str = ""
    logger: str = ""
    message: str = ""
    extra: dict = field(default_factory=dict)  # every other field of the line (pid, request_id, ...)
    raw: Optional[str] = None

    @property
    def level_number(self) -> int:
        return logging.getLevelName(self.level) if self.level in LEVELS else 0

    def matches(self, min_level: str = "", text: str = "") -> bool:
        """Whether the line is at ``min_level`` or above (a line without a level only when no level
        is asked for) and contains ``text`` (case-insensitive) in any field."""
        if min_level and (self.raw is not None or self.level_number < logging.getLevelName(min_level)):
            return False
        if text:
            haystack = (
                self.raw
                if self.raw is not None
                else " ".join(
                    [self.time, self.level, self.logger, self.message]
                    + [f"{k}={v}" for k, v in self.extra.items()]
                )
            )
            return text.casefold() in haystack.casefold()
        return True


def parse_line(text: str) -> LogLine:
    try:
        values = json.loads(text)
    except ValueError:
        return LogLine(raw=text)
    if not isinstance(values, dict):
        return LogLine(raw=text)
    known = {key: values.pop(key, "") for key in ("time", "level", "logger", "message")}
    return LogLine(**{k: v if isinstance(v, str) else json.dumps(v) for k, v in known.items()}, extra=values)


def rotated_paths(path: Path) -> List[Path]:
    """``path``'s rotated files, newest first (server.log.1, server.log.2, ...)."""
    pattern = re.compile(re.escape(path.name) + r"\.(\d+)$")
    found = []
    try:
        for entry in path.parent.iterdir():
            match = pattern.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
    except OSError:
        return []
    return [p for _, p in sorted(found)]


def log_files(directory: Optional[Path]) -> List[str]:
    """The names of the current (not rotated) log files in ``directory``: server.log first."""
    if directory is None:
        return []
    try:
        names = sorted(e.name for e in Path(directory).iterdir() if e.name.endswith(".log") and e.is_file())
    except OSError:
        return []
    return sorted(names, key=lambda n: n != "server.log")


def _lines_backwards(path: Path, end: int) -> Iterator[str]:
    """The lines of ``path`` before byte ``end`` (which ends a line), last first."""
    with open(path, "rb") as f:
        rest = b""
        position = end
        while position > 0:
            start = max(0, position - _BLOCK)
            f.seek(start)
            chunk = f.read(position - start) + rest
            position = start
            lines = chunk.split(b"\n")
            rest = lines.pop(0)  # may continue in the previous block
            for line in reversed(lines):
                if line:
                    yield line.decode("utf-8", errors="replace")
        if rest:
            yield rest.decode("utf-8", errors="replace")


def _complete_end(path: Path) -> int:
    """The offset just past the last newline of ``path`` (0: none)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        position = size
        while position > 0:
            start = max(0, position - _BLOCK)
            f.seek(start)
            chunk = f.read(position - start)
            index = chunk.rfind(b"\n")
            if index >= 0:
                return start + index + 1
            position = start
    return 0


def tail(
    path: Path, count: int, accept: Callable[[LogLine], bool] = lambda line: True
) -> Tuple[List[LogLine], "LogFollower"]:
    """The last ``count`` complete lines of ``path`` that ``accept`` takes, oldest first, looking
    into the rotated files when the current one has fewer; and a follower that starts right after
    them. A missing file gives no lines (the follower waits for it)."""
    path = Path(path)
    follower = LogFollower(path)
    found: List[LogLine] = []
    scanned = 0
    try:
        stat = path.stat()
        end = _complete_end(path)
    except OSError:
        return [], follower
    follower.identity, follower.position = (stat.st_dev, stat.st_ino), end
    sources = [(path, end)]
    for old in rotated_paths(path):
        try:
            sources.append((old, old.stat().st_size))  # a rotated file is complete
        except OSError:
            continue
    for source, source_end in sources:
        try:
            for text in _lines_backwards(source, source_end):
                scanned += 1
                line = parse_line(text)
                if accept(line):
                    found.append(line)
                if len(found) >= count or scanned >= MAX_SCAN_LINES:
                    return found[::-1], follower
        except OSError:
            continue
    return found[::-1], follower


class LogFollower:
    """The lines appended to one log file since the last ``read``; polled (no file watching API
    is portable). State: the identity of the file read so far and the offset of its first unread
    byte, which always starts a line."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.identity: Optional[Tuple[int, int]] = None  # (st_dev, st_ino); None: not opened yet
        self.position = 0

    def read(self) -> List[str]:
        """The complete lines written since the last call (at most ``MAX_READ_BYTES`` of them)."""
        try:
            stat = self.path.stat()
        except OSError:
            stat = None
        identity = None if stat is None else (stat.st_dev, stat.st_ino)
        lines: List[str] = []
        if self.identity is not None and identity != self.identity:
            lines += self._finish_rotated()  # rotated (or removed): read what the old file still had
            self.identity, self.position = None, 0
        if stat is None:
            return lines
        if self.identity is None:
            self.identity, self.position = identity, 0
        elif stat.st_size < self.position:  # truncated in place
            self.position = 0
        if stat.st_size > self.position:
            lines += self._read_from(self.path, final=False)
        return lines

    def _read_from(self, path: Path, final: bool) -> List[str]:
        with open(path, "rb") as f:
            f.seek(self.position)
            data = f.read(MAX_READ_BYTES)
        end = data.rfind(b"\n") + 1
        if final or (end == 0 and len(data) == MAX_READ_BYTES):
            end = len(data)  # a rotated file is complete; a line longer than a read is cut
        self.position += end
        return [line.decode("utf-8", errors="replace") for line in data[:end].split(b"\n") if line]

    def _finish_rotated(self) -> List[str]:
        for old in rotated_paths(self.path)[:1]:
            try:
                stat = old.stat()
                if (stat.st_dev, stat.st_ino) == self.identity and stat.st_size > self.position:
                    lines = []
                    while self.position < stat.st_size:
                        lines += self._read_from(old, final=True)
                    return lines
            except OSError:
                pass
        return []
