"""Commands of `omlx` for people at a terminal: pull, models, cache, bench, launch.

Each module has ``add_parser(subparsers)``, which registers its command with ``run(args) -> exit
code`` as the parser's default; omlx_site/cli.py calls ``add_parsers`` and runs ``args.run``.
"""
from __future__ import annotations

import os
from pathlib import Path


def add_parsers(subparsers) -> None:
    from . import bench, cache, launch, models, pull

    for module in (pull, models, cache, bench, launch):
        module.add_parser(subparsers)


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
