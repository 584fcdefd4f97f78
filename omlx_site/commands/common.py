"""What several commands share: where omlx keeps its files, where models are looked for without
--model-dir, and how a byte count is written."""

from __future__ import annotations

import os
from pathlib import Path


def omlx_home() -> Path:
    return Path(os.environ.get("OMLX_HOME") or Path.home() / ".omlx").expanduser()


def default_model_dir() -> Path:
    """Where `omlx serve` looks for models without --model-dir: $OMLX_MODEL_DIR, else
    $OMLX_HOME/models (as omlx_site/settings.py, without setting Django up)."""
    env = os.environ.get("OMLX_MODEL_DIR")
    return Path(env).expanduser() if env else omlx_home() / "models"


def human_bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n} B"
