"""The id of an SSD tier's folder, which workers publish in their summaries
(inference/dispatch/worker_summary.py): workers whose ``--paged-ssd-cache-dir`` is one shared
folder (a network file system) publish the same id, whatever path each mounts it at, and the
router (inference/dispatch/router.py) counts a prefix that one of them stored as restorable by
every one of them.

The id is 16 random hex digits in ``<folder>/tier-id``, made by the first worker to open the folder:
written to a temporary file, then hard-linked to its name, which fails when another worker linked
its own first (the loser reads the winner's), so every worker reads one complete id.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from pathlib import Path
from typing import Optional

logger = logging.getLogger("omlx.workers")

FILE = "tier-id"
_ID = re.compile(r"[0-9a-f]{16}\Z")


def tier_id(folder) -> str:
    """The id of the SSD tier in ``folder`` (made when it has none); "" when ``folder`` is None
    or cannot be read or written (the worker then shares nothing, as far as routing knows)."""
    if folder is None:
        return ""
    path = Path(folder).expanduser() / FILE
    try:
        found = _read(path)
        if found is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f".{FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            temp.write_text(secrets.token_hex(8) + "\n")
            try:
                os.link(temp, path)
            except FileExistsError:
                pass  # another worker's came first
            finally:
                temp.unlink(missing_ok=True)
            found = _read(path)
    except OSError as exc:
        logger.warning("the SSD tier's id in %s: %s", folder, exc)
        return ""
    if found is None:
        logger.warning("%s does not hold an SSD tier id: this worker shares no tier", path)
        return ""
    return found


def _read(path: Path) -> Optional[str]:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        return None
    return text if _ID.match(text) else None
