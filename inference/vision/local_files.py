"""Images named as server files (an absolute path or a ``file://`` URL): read only when they are
regular files inside a folder of the ``image_dir`` setting.

The path is resolved (symlinks followed, ``..`` removed) before the containment check, so a
symlink inside a folder that leads out of every folder is refused; the resolved path is opened
without following a last symlink, without blocking (a FIFO), and its descriptor must be a regular
file (no device: /dev/zero). Every refusal, and a missing or unreadable file, is the one
``REFUSED`` message, so a client learns nothing about files it may not read.
"""

from __future__ import annotations

import os
import stat
import urllib.parse

from .limits import ImageLimits, read_capped

REFUSED = (
    "the image file is not read: a request may name only regular files inside the folders of "
    "the image_dir setting (--image-dir)"
)


def is_local(url: str) -> bool:
    return url.startswith("/") or url.lower().startswith("file://")


def _path(url: str) -> str:
    if not url.lower().startswith("file://"):
        return url
    parts = urllib.parse.urlparse(url)
    if parts.netloc not in ("", "localhost"):  # file://host/...: another machine's file
        raise ValueError(REFUSED)
    return urllib.parse.unquote(parts.path)


def allowed_path(url: str, limits: ImageLimits) -> str:
    """The resolved path of ``url`` inside a folder of ``limits.image_dirs``; ValueError(REFUSED)
    otherwise (no folder, a relative path, outside every folder)."""
    if not limits.image_dirs:
        raise ValueError(REFUSED)
    path = _path(url)
    if not path.startswith("/") or "\0" in path:
        raise ValueError(REFUSED)
    real = os.path.realpath(path)
    for folder in limits.image_dirs:
        root = os.path.realpath(folder)
        if os.path.commonpath([real, root]) == root and real != root:
            return real
    raise ValueError(REFUSED)


def read_local(url: str, limits: ImageLimits, deadline: float) -> bytes:
    """The bytes of the allowed regular file ``url`` names (at most ``limits.max_bytes``)."""
    path = allowed_path(url, limits)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise ValueError(REFUSED) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device, a folder
            raise ValueError(REFUSED)
        return read_capped(lambda size: os.read(fd, size), limits, deadline)
    except OSError:  # a read error of an allowed file (EIO): as unreadable as a missing one
        raise ValueError(REFUSED) from None
    finally:
        os.close(fd)
