"""Django's secret key when OMLX_SECRET_KEY is not set: random, made once per OMLX_HOME and kept
in ``$OMLX_HOME/secret_key`` (0600), so the admin console's logins survive restarts."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from omlx_site.config import _warn


def load(omlx_home: Path) -> str:
    """The key in ``omlx_home/secret_key``, made (random, 0600) when the file is missing; a key
    that cannot be stored is still used for this process (logins then end with it)."""
    path = omlx_home / "secret_key"
    try:
        key = path.read_text().strip()
        if len(key) >= 32:
            return key
    except OSError:
        pass
    key = secrets.token_urlsafe(48)
    tmp = path.with_name(f".secret_key.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        try:
            os.link(tmp, path)  # fails when another process made the file first: use its key
        except FileExistsError:
            key = path.read_text().strip() or key
    except OSError as exc:
        _warn(f"cannot keep the session key in {path} ({exc}); admin logins end at restart")
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return key
