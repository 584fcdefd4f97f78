"""The built-in demo model: random weights, built on first use under OMLX_HOME (a hand-written
qwen2 of ``inference.testkit.text``: neither torch nor transformers is needed).

It exists so that omlx runs on a fresh machine with no model downloaded. Its output is
gibberish by design; it is named ``omlx-demo`` everywhere so nobody mistakes it for a model.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from inference.testkit.registry import build_model

DEMO_MODEL_NAME = "omlx-demo"
DEMO_ARCH = "qwen2"
DEMO_PRESET = "small"

logger = logging.getLogger("omlx")


def omlx_home() -> Path:
    return Path(os.environ.get("OMLX_HOME", Path.home() / ".omlx")).expanduser()


def demo_model_path() -> Path:
    """The demo model's folder, built (atomically) if it is not there yet."""
    path = omlx_home() / "demo" / DEMO_MODEL_NAME
    if (path / "config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    logger.info("building the demo model (random weights) in %s", path)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=path.parent))
    try:
        build_model(tmp, arch=DEMO_ARCH, preset=DEMO_PRESET, seed=0)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
