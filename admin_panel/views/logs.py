"""/admin/logs/: the tail of a log file of omlx_site/json_log.py (the server's own by default),
filtered by level and text; the page follows new lines over its websocket
(admin_panel/consumers/logs.py), which reads the same query."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional
from urllib.parse import urlencode

from django.conf import settings
from django.shortcuts import render

from admin_panel.auth import admin_required
from admin_panel.log_tail import LEVELS, LogLine, log_files, tail
from omlx_site.json_log import current_path

DEFAULT_LINES = 200
MAX_LINES = 5000


@dataclass
class LogQuery:
    """What the page shows: ``lines`` last lines of ``file`` (a name in ``directory``) at ``level``
    or above that contain ``text``. ``errors`` says which given values were refused (defaults used)."""

    directory: Optional[Path]
    file: str
    lines: int = DEFAULT_LINES
    level: str = ""
    text: str = ""
    follow: bool = True
    errors: List[str] = field(default_factory=list)

    @property
    def path(self) -> Optional[Path]:
        return None if self.directory is None else self.directory / self.file

    def accept(self, line: LogLine) -> bool:
        return line.matches(self.level, self.text)

    def query_string(self) -> str:
        return urlencode({"file": self.file, "lines": self.lines, "level": self.level, "q": self.text})


def log_directory() -> Optional[Path]:
    """Where this server writes its log (None: logging to a file is off)."""
    current = current_path()
    if current is not None:
        return current.parent
    return Path(settings.OMLX_LOG_DIR) if settings.OMLX_LOG_DIR else None


def read_query(params) -> LogQuery:
    """A LogQuery from GET parameters (the page's form, or the websocket's URL)."""
    current = current_path()
    query = LogQuery(log_directory(), current.name if current is not None else "server.log")
    name = (params.get("file") or "").strip()
    if name:
        if name in log_files(query.directory):
            query.file = name
        else:
            query.errors.append(f"There is no log file '{name}' in the log folder.")
    count = (params.get("lines") or "").strip()
    if count:
        try:
            query.lines = int(count)
            if not 1 <= query.lines <= MAX_LINES:
                raise ValueError
        except ValueError:
            query.lines = DEFAULT_LINES
            query.errors.append(
                f"Lines must be a whole number from 1 to {MAX_LINES}; showing {DEFAULT_LINES}."
            )
    level = (params.get("level") or "").strip().upper()
    if level in LEVELS:
        query.level = level
    elif level:
        query.errors.append(f"Unknown level '{level}': showing every level.")
    query.text = (params.get("q") or "").strip()[:200]
    query.follow = params.get("follow", "on" if "lines" not in params else "") == "on"
    return query


@admin_required
def logs(request):
    query = read_query(request.GET)
    lines, missing = [], False
    if query.path is not None:
        lines, _ = tail(query.path, query.lines, query.accept)
        missing = not query.path.exists()
    context = {
        "query": query,
        "log_lines": lines,
        "missing": missing,
        "levels": LEVELS,
        "files": log_files(query.directory) or [query.file],
        "max_lines": MAX_LINES,
    }
    template = "admin_panel/partials/logs_view.html" if request.htmx else "admin_panel/logs.html"
    return render(request, template, context)
