"""OMLX_HOME holds prompts (stored Responses, the KV cache's block files, logs) and secrets
(settings.json, secret_key): only its owner may read it. Every omlx process sets its umask to 077,
so every file and folder it creates is 0600 / 0700 wherever it is (the cold tier may live outside
OMLX_HOME); at start, OMLX_HOME itself and what is directly in it and in its logs folder are
tightened too (a home made by an older omlx was 0755)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger("omlx.settings")

UMASK = 0o077


def make_private(home: Path) -> None:
    """umask 077 for this process, OMLX_HOME created 0700, existing entries tightened."""
    os.umask(UMASK)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in (home, home / "logs"):
        _tighten(folder)
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            _tighten(entry)


def _tighten(path: Path) -> None:
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
            return
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            path.chmod(mode & 0o700)
    except OSError as exc:  # a read-only mount, a file just removed: not worth stopping for
        logger.debug("cannot tighten %s: %s", path, exc)
