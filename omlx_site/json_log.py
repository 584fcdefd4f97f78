"""The structured log: one JSON object per line, in a size-rotated file per process.

``omlx serve`` writes ``OMLX_LOG_DIR/server.log`` (default ``~/.omlx/logs/server.log``, as upstream),
each ``omlx worker`` ``OMLX_LOG_DIR/worker-<pid>.log``: a rotating file has one writer, since two
processes rotating one file lose lines. A process that does not name itself (``manage.py``, tests)
writes no file. The console keeps the human format. Settings: ``LOGGING`` in omlx_site/settings.py.

A line: ``{"time": "2026-11-29T20:01:02.345Z", "level": "INFO", "logger": "omlx.server",
"message": "...", "pid": 123}`` plus the ``extra`` fields of the call (``request_id``, ``model``, ...)
and ``exception`` (the traceback) when there is one.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path
from typing import Optional

_process: Optional[str] = None
_active_paths: dict = {}  # handler id -> the file it writes (for `current_path`)

# Attributes every LogRecord has: anything else came from ``extra=`` and goes into the line.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def name_process(name: str) -> None:
    """Name this process's log file (``server`` -> server.log); call before Django's setup."""
    global _process
    _process = name


def current_path() -> Optional[Path]:
    """The file this process writes its log to, or None."""
    return next(iter(_active_paths.values()), None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


class ProcessLogFile(logging.Handler):
    """Writes to ``directory/<process name>.log``, rotated at ``max_bytes`` with ``backups`` old
    files (server.log.1 ... server.log.N). Opened on the first record after ``name_process``;
    records before that, or in an unnamed process, are dropped. ``directory`` None: no file."""

    def __init__(self, directory, max_bytes: int = 10 * 1024 * 1024, backups: int = 5):
        super().__init__()
        self.directory = Path(directory) if directory else None
        self.max_bytes = max_bytes
        self.backups = backups
        self._file: Optional[logging.handlers.RotatingFileHandler] = None
        self._failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._file is None:
            if _process is None or self.directory is None or self._failed:
                return
            path = self.directory / f"{_process}.log"
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._file = logging.handlers.RotatingFileHandler(
                    path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8"
                )
            except OSError as err:
                self._failed = True
                print(f"omlx: cannot write the log file {path}: {err}", file=sys.stderr, flush=True)
                return
            self._file.setFormatter(self.formatter or JsonFormatter())
            _active_paths[id(self)] = path
        self._file.emit(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            _active_paths.pop(id(self), None)
            self._file = None
        super().close()


def worker_process_name() -> str:
    return f"worker-{os.getpid()}"
