"""Importing a GGUF model (an Ollama blob, a LM Studio ``.gguf`` file, a ``.gguf`` file lying in a
model directory) into the first model directory, so that it is served: the one time anything of
another app's is copied.

The conversion is the GGUF importer's (``inference.gguf.importer.import_gguf``); this module names
the folder it writes and checks an Ollama blob against its digest first (the blob's file name is
its sha256: a blob that does not hash to its name was changed or truncated, and is refused).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .discovery import ModelFolder
from .other_apps import MODEL_DIR, OLLAMA

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ImporterMissing(RuntimeError):
    """This build of omlx has no GGUF importer (inference.gguf.importer)."""


def destination(folder: ModelFolder, model_dir: Path) -> Path:
    """Where the import of ``folder`` goes: ``NAME-TAG`` (Ollama's ``NAME:TAG``; with a namespace,
    ``NAMESPACE/NAME-TAG``), ``PUBLISHER/FILE`` (LM Studio's ``PUBLISHER/NAME/FILE.gguf``) or
    ``FILE`` (a ``FILE.gguf`` in a model directory, whose id it keeps)."""
    if folder.origin == OLLAMA:
        return Path(model_dir) / ollama_folder(folder.id)
    if folder.origin == MODEL_DIR:  # a loose FILE.gguf: the folder FILE takes its id
        return Path(model_dir) / (_UNSAFE.sub("-", folder.id).strip(".-") or "model")
    publisher, *_, file = folder.id.split("/")
    parts = [publisher, file[: -len(".gguf")] if file.endswith(".gguf") else file]
    parts = [_UNSAFE.sub("-", p).strip(".-") or "model" for p in parts]
    return Path(model_dir).joinpath(*parts)


def ollama_folder(model_id: str) -> str:
    """The folder name of an imported Ollama model: ``NAME-TAG``, ``NAMESPACE/NAME-TAG``."""
    parts = model_id.replace(":", "-").split("/")[-2:]
    return "/".join(_UNSAFE.sub("-", p).strip(".-") or "model" for p in parts)


def verify_blob(blob: Path) -> None:
    """ValueError unless the Ollama blob ``sha256-HEX`` hashes to HEX."""
    expected = blob.name.removeprefix("sha256-")
    digest = hashlib.sha256()
    with open(blob, "rb") as file:
        while chunk := file.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise ValueError(
            f"the Ollama blob {blob} does not match its sha256 digest: it was changed or truncated"
        )


def import_model(folder: ModelFolder, model_dir: Path) -> Path:
    """Convert ``folder``'s GGUF file into an MLX folder under ``model_dir``; the folder's path.
    ValueError when it is no GGUF to import or its destination exists; ImporterMissing."""
    if folder.gguf is None:
        raise ValueError(f"{folder.id} is not a GGUF model: there is nothing to import")
    dest = destination(folder, model_dir)
    if dest.exists():
        raise ValueError(f"{dest} exists already: remove it to import {folder.id} again")
    if folder.origin == OLLAMA:
        verify_blob(folder.gguf)
    try:
        from inference.gguf.importer import import_gguf
    except ImportError as exc:
        raise ImporterMissing(
            f"GGUF import is not available in this build of omlx ({exc}); {folder.id} stays listed"
        ) from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(import_gguf(folder.gguf, dest))
