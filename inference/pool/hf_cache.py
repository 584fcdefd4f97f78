"""Models already in the Hugging Face cache (where huggingface_hub, transformers and mlx-lm
download them), found without copying them.

The cache's layout, as huggingface_hub writes it:

    <cache>/models--ORG--NAME/refs/main                 the commit the branch main points to
    <cache>/models--ORG--NAME/snapshots/<commit>/...    the files (symlinks into blobs/)
    <cache>/models--ORG--NAME/trees/<commit>.json       the file list of the commit (from 2.x)

A model's id is ``ORG/NAME`` (what `omlx pull ORG/NAME` would name it; ``NAME`` for the few
repos without an organisation, ``models--gpt2``) and its folder is the snapshot ``refs/main``
points to. A snapshot that lacks a weights file its file list names (a
download still running or interrupted) is listed with the reason and not served. Dataset and space
repos (``datasets--``, ``spaces--``) are not models and are skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

PREFIX = "models--"


def snapshots(cache_dir: Optional[Path]) -> Iterator[Tuple[str, Path, Optional[str]]]:
    """(model id, folder of its main snapshot, why it must not be served or None), by id."""
    for repo in _repos(cache_dir):
        model_id = repo.name[len(PREFIX) :].replace("--", "/", 1)
        try:
            commit = (repo / "refs" / "main").read_text().strip()
        except OSError:
            yield model_id, repo, "no snapshot of the branch main in the Hugging Face cache (refs/main)"
            continue
        folder = repo / "snapshots" / commit
        if not folder.is_dir():
            yield model_id, folder, f"refs/main names {commit}, which has no snapshot folder"
            continue
        missing = _missing_weights(model_id, repo.parent, commit, folder)
        reason = (
            (
                f"incomplete download: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                "missing (run the download again)"
            )
            if missing
            else None
        )
        yield model_id, folder, reason


def signature(cache_dir: Optional[Path]) -> Tuple:
    """Changes when a model is added to the cache, removed, or its main ref moves."""
    if cache_dir is None:
        return ()
    parts: List[tuple] = [(str(cache_dir), _mtime(cache_dir))]
    for repo in _repos(cache_dir):
        parts.append((repo.name, _mtime(repo / "refs" / "main"), _mtime(repo / "snapshots")))
    return tuple(parts)


def _repos(cache_dir: Optional[Path]) -> List[Path]:
    if cache_dir is None:
        return []
    try:
        return sorted(
            p
            for p in Path(cache_dir).expanduser().iterdir()
            if p.is_dir() and p.name.startswith(PREFIX) and len(p.name) > len(PREFIX)
        )
    except OSError:
        return []


def _missing_weights(model_id: str, cache_dir: Path, commit: str, folder: Path) -> List[str]:
    """Weights files (*.safetensors) the commit's file list names that the snapshot lacks (or
    whose blob is missing). Without a file list (older huggingface_hub), nothing can be told."""
    from huggingface_hub import get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    try:
        listed = get_cached_repo_tree(model_id, revision=commit, cache_dir=cache_dir)
    except (CachedRepoTreeNotFoundError, OSError, ValueError):
        return []
    return sorted(
        f.path for f in listed if f.path.endswith(".safetensors") and not (folder / f.path).is_file()
    )


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1
