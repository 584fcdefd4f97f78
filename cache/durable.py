"""Crash-safe file operations: a file is either absent or complete, and so is a directory entry.

POSIX makes a rename atomic but not durable: the data and the directory entry reach the disk only
when fsynced. Hence, for a new file: write a temp file in the same directory -> fsync it -> rename
over the final name -> fsync the directory. A crash at any instant leaves the old state, the new
state, or a temp file that start-up removes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Optional

logger = logging.getLogger("omlx.cache.cold")


def write_atomically(final: Path, tmp: Path, write: Callable) -> int:
    """``write(file)`` into ``tmp``, then make it ``final`` durably; returns the size written.
    On any error the temp file is removed and the error raised; ``final`` is untouched."""
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, final)
    except BaseException:
        remove(tmp)
        raise
    fsync_dir(final.parent)
    return size


def make_dirs(path: Path, stop: Optional[Path] = None) -> None:
    """mkdir -p that fsyncs each parent whose entries it changed. ``stop`` is never created (a
    missing ``stop`` raises FileNotFoundError): a cache must not recreate a removed root, such as
    the mount point of an unplugged drive, and fill the disk below it."""
    missing = []
    p = path
    while not p.is_dir() and p != stop and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not d.is_dir():
                raise
        fsync_dir(d.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path, log: Optional[str] = None) -> int:
    """Remove a file if it is there; 1 if this call removed it. Never raises."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return 0
    except OSError as err:
        logger.warning("cannot remove %s: %s", path, err)
        return 0
    if log:
        logger.warning("removed %s %s", log, path)
    return 1


def scandir(path) -> list:
    """Directory entries, or none if the directory cannot be read."""
    try:
        return list(os.scandir(path))
    except OSError:
        return []


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (its temp files may still be in use)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True
