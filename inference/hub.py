"""Downloading a model folder from the Hugging Face hub (`omlx pull`) with huggingface_hub:
resumable, verified and atomic.

huggingface_hub speaks the hub's protocol: the file list (``HfApi.model_info`` with the files'
sizes and hashes), each file's metadata (``get_hf_file_metadata``: a HEAD of its resolve URL,
which for LFS files redirects to a CDN), the download itself (``http_get``: retries of dropped
connections that resume with ``Range``), the endpoint (``HF_ENDPOINT`` or ``--hf-endpoint``), the
token (``HF_TOKEN``, ``--token`` or ``hf auth login``'s), offline mode (``HF_HUB_OFFLINE``) and the
hub's errors (``RepositoryNotFoundError``, ``GatedRepoError``, ``RevisionNotFoundError``, ...).

omlx keeps what huggingface_hub's own snapshot downloads do not give: a download that survives a
killed process, and a folder that appears only when it is complete. (huggingface_hub 2.4's
snapshot_download writes each file to a temporary name of its own process and deletes it when that
process fails, so a killed pull would start every unfinished file over.) On disk:

    <model_dir>/.omlx-pull/<org>/<name>/           staging: depth 3, so discovery never sees it
        .omlx-pull.json                            repo and commit being pulled
        <path>.incomplete                          a file being downloaded (resumed with Range)
        <path>                                     a file downloaded and verified
    <model_dir>/<org>/<name>/                      the finished folder, made by one rename

Every file is checked against the hub's size and hash (sha256 for LFS files, the git blob sha1
for the others) before it loses its ``.incomplete`` suffix; the staging folder is renamed into
place only when every file is there, so a folder at ``<org>/<name>`` is always complete. A dropped
connection is resumed at once by huggingface_hub; a killed process, or a pull that gave up, is
resumed by the next run. huggingface_hub writes in chunks of 10 MiB, so an interruption costs at
most the chunk in flight. A pull of another commit into the same staging folder starts over.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional
from urllib.parse import urlsplit

from cache.durable import fsync_dir

STAGING_DIR = ".omlx-pull"
MANIFEST = ".omlx-pull.json"
PARTIAL_SUFFIX = ".incomplete"
_CHUNK = 1 << 20

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Weight formats omlx does not load: skipped when the repo also has safetensors (--all-files
# takes everything).
_OTHER_WEIGHTS = re.compile(r"\.(bin|pt|pth|ckpt|h5|msgpack|ot|onnx|onnx_data|gguf|tflite|mlmodel)$")


class HubError(Exception):
    """A pull failed for a reason the user can act on; the message says what happened."""


@dataclass(frozen=True)
class HubFile:
    path: str  # relative, '/'-separated
    size: Optional[int]
    sha256: Optional[str] = None  # LFS files
    blob_id: Optional[str] = None  # git blob sha1 (checked for non-LFS files)


@dataclass(frozen=True)
class Snapshot:
    repo: str
    commit: str
    files: List[HubFile]

    @property
    def total_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)


class Progress:
    """What a pull reports as it goes (this base class ignores it all)."""

    def start(self, snapshot: Snapshot, done_bytes: int) -> None: ...
    def file_start(self, file: HubFile, done_bytes: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def rewind(self, nbytes: int) -> None: ...  # a partial file was dropped and starts over
    def file_done(self, file: HubFile) -> None: ...
    def finish(self, path: Path) -> None: ...


def staging_path(model_dir, repo: str) -> Path:
    """Where a pull of ``repo`` into ``model_dir`` keeps its files until it is complete."""
    return Path(model_dir).expanduser() / STAGING_DIR / repo


def partial_path(staging: Path, path: str) -> Path:
    """The file that holds what arrived of ``path`` (relative, '/'-separated) while it downloads:
    the bytes a resumed pull keeps and asks the hub for the rest of with ``Range``."""
    dest = staging / path
    return dest.with_name(dest.name + PARTIAL_SUFFIX)


def check_repo_id(repo: str) -> str:
    if not _REPO_ID.match(repo) or ".." in repo:
        raise ValueError(f"{repo!r} is not a Hugging Face model id of the form ORG/NAME")
    return repo


def hub_endpoint(endpoint: Optional[str] = None) -> str:
    """``endpoint``, else $HF_ENDPOINT (as huggingface_hub reads it), else https://huggingface.co."""
    from huggingface_hub import constants

    url = (endpoint or constants.ENDPOINT).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"hub endpoint {url!r} must start with http:// or https://")
    return url


def pull(
    repo: str,
    model_dir,
    revision: str = "main",
    endpoint: Optional[str] = None,
    token: Optional[str] = None,
    progress: Optional[Progress] = None,
    all_files: bool = False,
) -> Path:
    """Download ``repo`` at ``revision`` into ``model_dir/ORG/NAME`` and return that path.

    HubError for the hub's refusals, unreachable endpoints and offline mode; ValueError for a bad
    repo id or endpoint; FileExistsError when the destination exists already.
    """
    check_repo_id(repo)
    endpoint = hub_endpoint(endpoint)
    progress = progress or Progress()
    model_dir = Path(model_dir).expanduser()
    final = model_dir / repo
    if final.exists():
        raise FileExistsError(f"{final} already exists (remove it to pull {repo} again)")
    with _hub_errors(endpoint, repo, revision, token):
        snapshot = _snapshot(repo, revision, endpoint, token)
    if not all_files:
        snapshot = _without_other_weights(snapshot)
    staging = staging_path(model_dir, repo)
    staging.mkdir(parents=True, exist_ok=True)
    lock = staging.with_name(staging.name + ".lock")
    with _locked(lock, staging):
        _prepare_staging(staging, snapshot)
        progress.start(snapshot, sum(_downloaded(staging, f) for f in snapshot.files))
        for file in snapshot.files:
            with _hub_errors(endpoint, repo, snapshot.commit, token, file.path):
                _download(repo, snapshot.commit, file, staging, endpoint, token, progress)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            raise FileExistsError(f"{final} appeared while pulling (another pull finished first?)")
        fsync_dir(staging)
        os.rename(staging, final)
        fsync_dir(final.parent)
        lock.unlink(missing_ok=True)
    _remove_empty_parents(staging.parent, stop=model_dir)
    progress.finish(final)
    return final


def _snapshot(repo: str, revision: str, endpoint: str, token: Optional[str]) -> Snapshot:
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint, token=token, library_name="omlx").model_info(
        repo, revision=revision, files_metadata=True
    )
    try:
        files = [_hub_file(s) for s in info.siblings or []]
    except (ValueError, TypeError) as exc:
        raise HubError(f"{endpoint} listed an unusable file in {repo} ({exc})") from None
    if not files:
        raise HubError(f"{repo} has no files at revision {revision}")
    return Snapshot(repo, info.sha or revision, sorted(files, key=lambda f: f.path))


def _download(
    repo: str,
    commit: str,
    file: HubFile,
    staging: Path,
    endpoint: str,
    token: Optional[str],
    progress: Progress,
) -> None:
    """Make ``staging/file.path`` the verified file, resuming ``<path>.incomplete``."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    dest = staging / file.path
    if dest.is_file() and (file.size is None or dest.stat().st_size == file.size):
        return  # verified by an earlier run before it got its name
    part = partial_path(staging, file.path)
    part.parent.mkdir(parents=True, exist_ok=True)
    have = _size(part)
    if file.size is not None and have > file.size:  # not this file: start over
        part.unlink()
        have = 0
    progress.file_start(file, have)
    url = hf_hub_url(repo, file.path, revision=commit, endpoint=endpoint)
    meta = get_hf_file_metadata(url, token=token, library_name="omlx")
    headers = build_hf_headers(token=token, library_name="omlx")
    if _origin(meta.location) != _origin(url):  # a CDN's signed URL: the token stays with the hub
        headers.pop("authorization", None)
    expected = file.size if file.size is not None else meta.size
    with _AppendFile(part) as f:
        try:
            http_get(
                meta.location,
                f,
                resume_size=have,
                headers=headers,
                expected_size=expected,
                displayed_filename=file.path,
                tqdm_class=_progress_bar(progress, have),
            )
        except OSError as exc:
            if "Consistency check failed" not in str(exc):
                raise
            # Fewer or more bytes than listed: checked (and the file dropped) below.
    _verify(part, file, progress)
    os.replace(part, dest)
    progress.file_done(file)


class _AppendFile:
    """The ``.incomplete`` file as http_get writes it: every chunk goes to the OS at once (a
    killed process keeps what it received), and a rewind (a server that ignored Range) truncates."""

    def __init__(self, path: Path):
        self.raw = open(path, "ab", buffering=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.fsync(self.raw.fileno())
        self.raw.close()

    def write(self, data) -> int:
        view = memoryview(data)
        while view:  # a raw write may take part of a chunk
            view = view[self.raw.write(view) :]
        return len(data)

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def truncate(self, size: Optional[int] = None) -> int:
        return self.raw.truncate(size)


def _progress_bar(progress: Progress, resumed: int):
    """A tqdm stand-in for http_get that reports to ``progress``: a negative update is a rewind."""

    class Bar:
        def __init__(self, *args, initial: int = 0, **kwargs):
            if initial < resumed:  # the server ignored Range: the partial bytes were dropped
                progress.rewind(resumed - initial)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def update(self, n=1):
            if n and n > 0:
                progress.advance(int(n))
            elif n:
                progress.rewind(int(-n))

        def close(self):
            return None

    return Bar


class _hub_errors:
    """Turns huggingface_hub's and the network's exceptions into a HubError that says what to do."""

    def __init__(
        self, endpoint: str, repo: str, revision: str, token: Optional[str], path: Optional[str] = None
    ):
        self.endpoint, self.repo, self.revision, self.token, self.path = endpoint, repo, revision, token, path

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, (HubError, KeyboardInterrupt)):
            return False
        message = self.message(exc)
        if message is None:
            return False
        raise HubError(message) from None

    def message(self, exc: BaseException) -> Optional[str]:
        import httpx2
        from huggingface_hub import errors
        from huggingface_hub.utils import OfflineModeIsEnabled

        repo, page = self.repo, f"{self.endpoint}/{self.repo}"
        detail = _detail(exc)
        if isinstance(exc, OfflineModeIsEnabled):
            return (
                "HF_HUB_OFFLINE is set: omlx pull needs the hub (models already in the Hugging "
                "Face cache are served without pulling, see --hf-cache)"
            )
        if isinstance(exc, errors.GatedRepoError):
            if self.token:
                return (
                    f"{repo} is gated and this token has no access to it: accept its terms at {page}{detail}"
                )
            return (
                f"{repo} is gated: accept its terms at {page}, "
                f"then pass a token with --token or HF_TOKEN{detail}"
            )
        if isinstance(exc, errors.RevisionNotFoundError):
            return f"revision {self.revision!r} does not exist in {repo}{detail}"
        if isinstance(exc, errors.RemoteEntryNotFoundError):
            return f"{self.path or 'a file'} is listed in {repo} but cannot be downloaded{detail}"
        if isinstance(exc, errors.RepositoryNotFoundError):
            hint = "" if self.token else " (a private repository needs a token: --token or HF_TOKEN)"
            return f"repository {repo} not found{hint}{detail}"
        if isinstance(exc, errors.HfHubHTTPError):
            status = exc.response.status_code if exc.response is not None else None
            if status in (401, 403):
                if self.token:
                    return f"the hub refused the token for {repo}{detail}"
                return f"{repo} needs authentication: pass a token with --token or HF_TOKEN{detail}"
            return f"the hub answered HTTP {status} for {repo}{detail}"
        if isinstance(exc, httpx2.TransportError) and self.path is not None:
            return (
                f"downloading {self.path} failed after huggingface_hub's retries; run the same "
                f"command again to resume ({_describe(exc)})"
            )
        if isinstance(exc, httpx2.TransportError):
            return (
                f"cannot reach the hub at {self.endpoint} ({_describe(exc)}); check the network, "
                "or use a mirror with --hf-endpoint / HF_ENDPOINT"
            )
        if isinstance(exc, errors.FileMetadataError):
            return f"{self.endpoint} does not answer as a Hugging Face hub ({exc})"
        return None


def _detail(exc) -> str:
    response = getattr(exc, "response", None)
    if response is None:
        return ""
    message = response.headers.get("x-error-message", "")
    return f" (HTTP {response.status_code}: {message})" if message else f" (HTTP {response.status_code})"


def _hub_file(sibling) -> HubFile:
    path = sibling.rfilename
    if not isinstance(path, str):
        raise TypeError("rfilename is not a string")
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or any(p in ("", ".", "..") for p in parts)
        or parts[0] == STAGING_DIR
        or path.endswith(PARTIAL_SUFFIX)
        or path == MANIFEST
    ):
        raise ValueError(f"unsafe file name {path!r}")
    lfs = sibling.lfs
    size = lfs.size if lfs else sibling.size
    return HubFile(
        path,
        int(size) if size is not None else None,
        lfs.sha256 if lfs else None,
        None if lfs else sibling.blob_id,
    )


def _without_other_weights(snapshot: Snapshot) -> Snapshot:
    if not any(f.path.endswith(".safetensors") for f in snapshot.files):
        return snapshot
    kept = [f for f in snapshot.files if not _OTHER_WEIGHTS.search(f.path)]
    return Snapshot(snapshot.repo, snapshot.commit, kept)


def _verify(part: Path, file: HubFile, progress: Progress) -> None:
    size = _size(part)
    problem = None
    if file.size is not None and size != file.size:
        problem = f"{size} bytes, the hub lists {file.size}"
    elif file.sha256 or file.blob_id:
        h = hashlib.sha256() if file.sha256 else hashlib.sha1(b"blob %d\0" % size)
        with open(part, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
        expected = (file.sha256 or file.blob_id).lower()
        if h.hexdigest() != expected:
            problem = f"{'sha256' if file.sha256 else 'git blob sha1'} {h.hexdigest()}, expected {expected}"
    if problem:
        progress.rewind(size)
        part.unlink(missing_ok=True)
        raise HubError(
            f"{file.path} arrived corrupt ({problem}); it was removed, run the same "
            "command again to download it anew"
        )


def _prepare_staging(staging: Path, snapshot: Snapshot) -> None:
    manifest = staging / MANIFEST
    wanted = {"repo": snapshot.repo, "commit": snapshot.commit}
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        recorded = None
    if recorded != wanted:
        for entry in staging.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        manifest.write_text(json.dumps(wanted) + "\n")


def _downloaded(staging: Path, file: HubFile) -> int:
    dest = staging / file.path
    if dest.is_file():
        return dest.stat().st_size
    return _size(partial_path(staging, file.path))


class _locked:
    """An exclusive lock on a staging folder: a second pull of the same repo fails at once."""

    def __init__(self, path: Path, staging: Path):
        self.path, self.staging = path, staging

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise HubError(f"another `omlx pull` is downloading into {self.staging}") from None
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def _origin(url: str):
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _remove_empty_parents(path: Path, stop: Path) -> None:
    while path != stop and stop in path.parents:
        try:
            path.rmdir()
        except OSError:
            return
        path = path.parent
