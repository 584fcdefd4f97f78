"""Facts about files that discovery reads without failing: a file that vanished or cannot be
read counts as size 0 and mtime -1 (the scan goes on; the next one sees the change)."""

from __future__ import annotations

import os
from pathlib import Path


def mtime_ns(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
