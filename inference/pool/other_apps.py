"""Models other apps downloaded, found where those apps keep them; nothing is copied.

- **LM Studio** keeps models at ``ROOT/PUBLISHER/NAME`` (ROOT: ``~/.lmstudio/models``, older
  versions ``~/.cache/lm-studio/models``). A folder with a ``config.json`` (an MLX or Hugging Face
  folder) is a candidate model folder, id ``PUBLISHER/NAME``, served in place; a ``*.gguf`` file
  (not a vision projector ``mmproj-*``) is listed as ``PUBLISHER/NAME/FILE.gguf``, to import.
- **Ollama** keeps ``ROOT/manifests/REGISTRY/NAMESPACE/NAME/TAG`` (OCI-like JSON: ``layers``, each
  with ``mediaType``, ``digest`` and ``size``) and ``ROOT/blobs/sha256-HEX`` (ROOT: ``$OLLAMA_MODELS``,
  else ``~/.ollama/models``). A model is named as Ollama shows it: ``NAME:TAG`` in the library
  (``registry.ollama.ai/library``), ``NAMESPACE/NAME:TAG`` elsewhere on registry.ollama.ai,
  ``REGISTRY/NAMESPACE/NAME:TAG`` on other registries. Its weights are the blob of the layer
  ``application/vnd.ollama.image.model``, a GGUF file: listed to import.

Both trees are hostile input: a manifest is read up to ``MAX_MANIFEST_BYTES`` without following a
symbolic link, a digest must be ``sha256:`` and 64 lowercase hex digits (so it names a blob file
and nothing else), a blob that is a link leading out of ``blobs/`` is refused, a blob must start
with GGUF's magic and have the size its manifest says (its sha256 is checked when it is imported:
``app_import``). What fails is skipped with a logged reason, never raised. LM Studio's folders are
model folders as the user keeps them (links allowed, as in a model directory).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from .file_facts import mtime_ns
from .file_facts import size as file_size

logger = logging.getLogger("omlx.models")

MODEL_DIR, HF_CACHE, LMSTUDIO, OLLAMA = "model dir", "Hugging Face cache", "LM Studio", "Ollama"
MAX_MANIFEST_BYTES = 1 << 20  # real manifests are under 2 KB
MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY, OLLAMA_LIBRARY = "registry.ollama.ai", "library"
GGUF_MAGIC = b"GGUF"
IMPORT_REASON = "GGUF weights: import to serve (the Models page's Import, or `omlx import FILE.gguf`)"
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # a path part of a model name or tag


@dataclass(frozen=True)
class OtherApps:
    """The roots searched (None: not searched), resolved from the settings ``lmstudio_models``
    and ``ollama_models`` ("auto", None for off, or a folder)."""

    lmstudio: Optional[Path] = None
    ollama: Optional[Path] = None

    @classmethod
    def from_settings(cls, lmstudio, ollama) -> "OtherApps":
        home = Path.home()
        if lmstudio == "auto":
            lmstudio = _first_dir(home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models")
        if ollama == "auto":
            env = os.environ.get("OLLAMA_MODELS")
            ollama = _first_dir(Path(env).expanduser() if env else home / ".ollama" / "models")
        return cls(Path(lmstudio) if lmstudio else None, Path(ollama) if ollama else None)


@dataclass(frozen=True)
class Candidate:
    """One model found: a folder to inspect (``gguf`` None) or a GGUF file to import."""

    id: str
    path: Path
    origin: str
    gguf: Optional[Path] = None


def candidates(apps: Optional[OtherApps]) -> List[Candidate]:
    if apps is None:
        return []
    found = list(_lmstudio(apps.lmstudio)) if apps.lmstudio else []
    return found + (list(_ollama(apps.ollama)) if apps.ollama else [])


def signature(apps: Optional[OtherApps]) -> Tuple:
    """Changes when a model of either app appears, disappears or changes (folder mtimes)."""
    if apps is None:
        return ()
    parts = []
    if apps.lmstudio:
        parts += [(str(p), mtime_ns(p)) for p in [apps.lmstudio, *_subdirs(apps.lmstudio)]]
        parts += [(str(g), mtime_ns(g)) for p in _subdirs(apps.lmstudio) for g in _subdirs(p)]
    if apps.ollama:
        manifests = apps.ollama / "manifests"
        for dirpath, _, files in os.walk(manifests):  # does not follow links
            parts.append((dirpath, mtime_ns(Path(dirpath)), tuple(sorted(files))))
    return tuple(parts)


# -- LM Studio ---------------------------------------------------------------------------------


def _lmstudio(root: Path) -> Iterator[Candidate]:
    for publisher in _subdirs(root):
        for folder in _subdirs(publisher):
            model_id = f"{publisher.name}/{folder.name}"
            if (folder / "config.json").is_file():
                yield Candidate(model_id, folder, LMSTUDIO)
                continue
            for file in _files(folder, ".gguf"):
                if file.name.startswith("mmproj"):
                    continue  # a vision projector, not a model
                yield Candidate(f"{model_id}/{file.name}", file, LMSTUDIO, file)


# -- Ollama ------------------------------------------------------------------------------------


def _ollama(root: Path) -> Iterator[Candidate]:
    manifests = root / "manifests"
    for registry in _subdirs(manifests, links=False):
        for namespace in _subdirs(registry, links=False):
            for name in _subdirs(namespace, links=False):
                for manifest in _files(name, "", regular=False):  # read_manifest refuses a link, a FIFO
                    try:
                        model_id = ollama_name(registry.name, namespace.name, name.name, manifest.name)
                        blob = _model_blob(root, manifest)
                    except ValueError as exc:
                        logger.warning("Ollama manifest %s skipped: %s", manifest, exc)
                        continue
                    yield Candidate(model_id, blob, OLLAMA, blob)


def ollama_name(registry: str, namespace: str, name: str, tag: str) -> str:
    """The name Ollama shows for a manifest at REGISTRY/NAMESPACE/NAME/TAG."""
    for part in (registry, namespace, name, tag):
        if not _PART.fullmatch(part):
            raise ValueError(f"{part!r} is not a model name part Ollama writes")
    if registry == OLLAMA_REGISTRY:
        return f"{name}:{tag}" if namespace == OLLAMA_LIBRARY else f"{namespace}/{name}:{tag}"
    return f"{registry}/{namespace}/{name}:{tag}"


def ollama_manifest(root: Path, name: str) -> Tuple[str, Path]:
    """(the name as Ollama shows it, its manifest's path) for a name as ``ollama run`` takes it:
    ``NAME[:TAG]``, ``NAMESPACE/NAME[:TAG]`` or ``REGISTRY/NAMESPACE/NAME[:TAG]`` (no tag:
    ``latest``). ValueError for a name of other parts; the manifest may not exist."""
    path, _, tag = name.partition(":")
    parts = path.split("/")
    if len(parts) > 3:
        raise ValueError(f"{name!r} is not an Ollama model name (NAME:TAG, NAMESPACE/NAME:TAG)")
    parts = [OLLAMA_REGISTRY, OLLAMA_LIBRARY][: 3 - len(parts)] + parts
    model_id = ollama_name(*parts, tag or "latest")
    return model_id, root / "manifests" / Path(*parts) / (tag or "latest")


def find_ollama(root: Path, name: str) -> Candidate:
    """The Ollama model ``name`` (``ollama_manifest``) in ``root``, its blob checked as discovery
    checks it (``_model_blob``: a regular manifest, one model layer, a GGUF blob inside
    ``blobs/`` of the size the manifest says); ValueError says why there is none."""
    model_id, manifest = ollama_manifest(root, name)
    if not manifest.exists() and not manifest.is_symlink():
        raise ValueError(f"no Ollama model {model_id} in {root} (`ollama pull {model_id}` first?)")
    try:
        blob = _model_blob(root, manifest)
    except ValueError as exc:
        raise ValueError(f"Ollama model {model_id}: manifest {manifest}: {exc}") from None
    return Candidate(model_id, blob, OLLAMA, blob)


def read_manifest(path: Path) -> dict:
    """The manifest's JSON, read up to MAX_MANIFEST_BYTES without following a link (ValueError)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ValueError(f"cannot be opened ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = file.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("layers"), list):
        raise ValueError('not a manifest (a JSON object with a list "layers")')
    return manifest


def blob_path(root: Path, digest) -> Path:
    """The blob file a digest names; ValueError unless it is ``sha256:`` + 64 lowercase hex."""
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise ValueError(f"digest {str(digest)[:80]!r} is not sha256: and 64 hex digits")
    return root / "blobs" / f"sha256-{match.group(1)}"


def _model_blob(root: Path, manifest_path: Path) -> Path:
    manifest = read_manifest(manifest_path)
    layers = [
        layer
        for layer in manifest["layers"]
        if isinstance(layer, dict) and layer.get("mediaType") == MODEL_LAYER
    ]
    if len(layers) != 1:
        raise ValueError(f"{len(layers)} layers of type {MODEL_LAYER} (one expected)")
    blob = blob_path(root, layers[0].get("digest"))
    if not _inside(blob, root / "blobs"):
        raise ValueError(f"blob {blob.name} is a link out of {root / 'blobs'}")
    if not blob.is_file():
        raise ValueError(f"blob {blob.name} is missing")
    size = layers[0].get("size")
    if isinstance(size, int) and size != file_size(blob):
        raise ValueError(f"blob {blob.name} has {file_size(blob)} bytes, the manifest says {size}")
    with open(blob, "rb") as file:
        if file.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ValueError(f"blob {blob.name} is not a GGUF file")
    return blob


# -- file system helpers -----------------------------------------------------------------------


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def _first_dir(*paths: Path) -> Optional[Path]:
    return next((p for p in paths if p.is_dir()), None)


def _subdirs(path: Path, links: bool = True) -> List[Path]:
    try:
        return sorted(
            p
            for p in path.iterdir()
            if not p.name.startswith(".") and p.is_dir() and (links or not p.is_symlink())
        )
    except OSError:
        return []


def _files(path: Path, suffix: str, regular: bool = True) -> List[Path]:
    """Non-hidden entries named ``*suffix`` that are not folders: only files (and links to
    them) when ``regular``, else anything (for a reader that refuses the rest with a reason)."""
    try:
        return sorted(
            p
            for p in path.iterdir()
            if not p.name.startswith(".")
            and p.name.endswith(suffix)
            and (p.is_file() if regular else p.is_symlink() or not p.is_dir())
        )
    except OSError:
        return []
