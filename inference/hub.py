"""Downloading a model folder from the Hugging Face hub (`omlx pull`): resumable and atomic.

The hub protocol, as the hub and its mirrors speak it:

- ``GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`` -> JSON with ``sha`` (the
  commit) and ``siblings``: ``rfilename``, ``size``, ``blobId`` (git blob sha1) and, for LFS
  files, ``lfs.sha256``.
- ``GET {endpoint}/{repo}/resolve/{commit}/{path}`` -> the file, often through a redirect to a
  CDN; ``Range: bytes=N-`` asks for the rest of a partial file (206).
- Errors: 401 / 403 / 404 with an ``X-Error-Code`` header (RepoNotFound, GatedRepo,
  RevisionNotFound, EntryNotFound) and an ``X-Error-Message``.

On disk, how a pull stays resumable and never shows a half model:

    <model_dir>/.omlx-pull/<org>/<name>/           staging: depth 3, so discovery never sees it
        .omlx-pull.json                            repo and commit being pulled
        <path>.incomplete                          a file being downloaded (resumed with Range)
        <path>                                     a file downloaded and verified
    <model_dir>/<org>/<name>/                      the finished folder, made by one rename

Every file is checked against its size and its hash (sha256 for LFS files, the git blob sha1 for
the others) before it loses its ``.incomplete`` suffix; the staging folder is renamed into place
only when every file is there, so a folder at ``<org>/<name>`` is always complete. An
interrupted pull (a dropped connection is retried at once; a killed process on the next run)
continues where it stopped. A pull of another commit into the same staging folder starts over.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional
from urllib.parse import quote

import httpx

from cache.durable import fsync_dir

logger = logging.getLogger("omlx.hub")

DEFAULT_ENDPOINT = "https://huggingface.co"
STAGING_DIR = ".omlx-pull"
MANIFEST = ".omlx-pull.json"
PARTIAL_SUFFIX = ".incomplete"
RETRIES = 5  # attempts per file after a dropped connection or a 5xx, each resuming the last
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


def check_repo_id(repo: str) -> str:
    if not _REPO_ID.match(repo) or ".." in repo:
        raise ValueError(f"{repo!r} is not a Hugging Face model id of the form ORG/NAME")
    return repo


def pull(repo: str, model_dir, revision: str = "main", endpoint: Optional[str] = None,
         token: Optional[str] = None, progress: Optional[Progress] = None,
         all_files: bool = False) -> Path:
    """Download ``repo`` at ``revision`` into ``model_dir/ORG/NAME`` and return that path.

    HubError for the hub's refusals and unreachable endpoints; ValueError for a bad repo id;
    FileExistsError when the destination exists already.
    """
    check_repo_id(repo)
    progress = progress or Progress()
    model_dir = Path(model_dir).expanduser()
    final = model_dir / repo
    if final.exists():
        raise FileExistsError(f"{final} already exists (remove it to pull {repo} again)")
    with HubClient(endpoint, token) as client:
        snapshot = client.snapshot(repo, revision)
        if not all_files:
            snapshot = _without_other_weights(snapshot)
        staging = model_dir / STAGING_DIR / repo
        staging.mkdir(parents=True, exist_ok=True)
        lock = staging.with_name(staging.name + ".lock")
        with _locked(lock, staging):
            _prepare_staging(staging, snapshot)
            progress.start(snapshot, sum(_downloaded(staging, f) for f in snapshot.files))
            for file in snapshot.files:
                client.download(repo, snapshot.commit, file, staging, progress)
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


class HubClient:
    """The two calls of the hub protocol that a pull needs (see the module docstring)."""

    def __init__(self, endpoint: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 30.0):
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"hub endpoint {self.endpoint!r} must start with http:// or https://")
        self.token = token
        headers = {"User-Agent": "omlx-pull/1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # httpx drops Authorization when a redirect leaves the endpoint's host (a CDN).
        self.client = httpx.Client(headers=headers, follow_redirects=True,
                                   timeout=httpx.Timeout(timeout, connect=10.0))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.client.close()

    def snapshot(self, repo: str, revision: str) -> Snapshot:
        url = f"{self.endpoint}/api/models/{repo}/revision/{quote(revision, safe='')}"
        response = self._request("GET", url, params={"blobs": "true"}, repo=repo, revision=revision)
        try:
            info = response.json()
            siblings = info["siblings"]
            files = [_hub_file(s) for s in siblings]
        except (ValueError, KeyError, TypeError) as exc:
            raise HubError(f"{url} did not answer with a model's file list ({exc})") from None
        if not files:
            raise HubError(f"{repo} has no files at revision {revision}")
        commit = info.get("sha") if isinstance(info.get("sha"), str) else revision
        return Snapshot(repo, commit, sorted(files, key=lambda f: f.path))

    def download(self, repo: str, commit: str, file: HubFile, staging: Path, progress: Progress) -> None:
        """Make ``staging/file.path`` the verified file, resuming ``<path>.incomplete``."""
        dest = staging / file.path
        if dest.is_file() and (file.size is None or dest.stat().st_size == file.size):
            return  # verified by an earlier run before it got its name
        part = dest.with_name(dest.name + PARTIAL_SUFFIX)
        part.parent.mkdir(parents=True, exist_ok=True)
        url = f"{self.endpoint}/{repo}/resolve/{quote(commit, safe='')}/{quote(file.path)}"
        progress.file_start(file, _size(part))
        for attempt in range(1, RETRIES + 1):
            try:
                self._fetch(url, part, file, progress, repo, commit)
                break
            except (httpx.TransportError, _Retry) as exc:
                if attempt == RETRIES:
                    raise HubError(f"downloading {file.path} failed {RETRIES} times; run the same "
                                   f"command again to resume ({_describe(exc)})") from None
                logger.info("%s: %s; resuming (attempt %d)", file.path, _describe(exc), attempt + 1)
                time.sleep(0.5 * attempt)
        _verify(part, file, progress)
        os.replace(part, dest)
        progress.file_done(file)

    def _fetch(self, url: str, part: Path, file: HubFile, progress: Progress, repo: str,
               commit: str) -> None:
        have = _size(part)
        if file.size is not None and have > file.size:
            progress.rewind(have)
            part.unlink()
            have = 0
        if file.size is not None and have == file.size:
            part.touch()  # an empty file has nothing to download
            return
        headers = {"Range": f"bytes={have}-"} if have else {}
        with self.client.stream("GET", url, headers=headers) as response:
            if response.status_code == 416:  # nothing left past `have`: trust the checks below
                return
            if response.status_code >= 500:
                raise _Retry(f"HTTP {response.status_code}")
            if response.status_code >= 400:
                response.read()
                raise _http_error(response, self.endpoint, repo, commit, self.token, file.path)
            if response.status_code == 206:
                start = _range_start(response.headers.get("content-range"))
                if start != have:
                    raise _Retry(f"asked for bytes from {have}, got a range from {start}")
                mode = "ab"
            else:  # 200: the server ignored the range; start over
                if have:
                    progress.rewind(have)
                mode = "wb"
            # Unbuffered, chunks as they arrive: what was received is on disk when the
            # connection or the process dies, and the next attempt asks for the rest.
            with open(part, mode, buffering=0) as f:
                for chunk in response.iter_bytes():
                    view = memoryview(chunk)
                    while view:  # a raw write may take part of a chunk
                        view = view[f.write(view):]
                    progress.advance(len(chunk))
                os.fsync(f.fileno())

    def _request(self, method: str, url: str, repo: str, revision: str, **kwargs) -> httpx.Response:
        try:
            response = self.client.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise HubError(f"cannot reach the hub at {self.endpoint} ({_describe(exc)}); "
                           "check the network, or use a mirror with --hf-endpoint / HF_ENDPOINT") from None
        if response.status_code >= 400:
            raise _http_error(response, self.endpoint, repo, revision, self.token)
        return response


class _Retry(Exception):
    """A transient failure of one download attempt."""


def _hub_file(sibling: dict) -> HubFile:
    path = sibling["rfilename"]
    if not isinstance(path, str):
        raise TypeError("rfilename is not a string")
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path
            or any(p in ("", ".", "..") for p in parts) or parts[0] == STAGING_DIR
            or path.endswith(PARTIAL_SUFFIX) or path == MANIFEST):
        raise ValueError(f"unsafe file name {path!r}")
    lfs = sibling.get("lfs") or {}
    size = lfs.get("size", sibling.get("size"))
    return HubFile(path, int(size) if size is not None else None, lfs.get("sha256") or None,
                   None if lfs else sibling.get("blobId"))


def _without_other_weights(snapshot: Snapshot) -> Snapshot:
    if not any(f.path.endswith(".safetensors") for f in snapshot.files):
        return snapshot
    kept = [f for f in snapshot.files if not _OTHER_WEIGHTS.search(f.path)]
    return Snapshot(snapshot.repo, snapshot.commit, kept)


def _http_error(response: httpx.Response, endpoint: str, repo: str, revision: str,
                token: Optional[str], path: Optional[str] = None) -> HubError:
    code = response.headers.get("x-error-code", "")
    message = response.headers.get("x-error-message", "") or _body_error(response)
    status = response.status_code
    detail = f" (HTTP {status}: {message})" if message else f" (HTTP {status})"
    page = f"{endpoint}/{repo}"
    if code == "GatedRepo":
        if token:
            return HubError(f"{repo} is gated and this token has no access to it: accept its terms "
                            f"at {page}{detail}")
        return HubError(f"{repo} is gated: accept its terms at {page}, then pass a token with "
                        f"--token or HF_TOKEN{detail}")
    if code == "RevisionNotFound":
        return HubError(f"revision {revision!r} does not exist in {repo}{detail}")
    if code == "EntryNotFound" or (status == 404 and path is not None and code != "RepoNotFound"):
        return HubError(f"{path or 'a file'} is listed in {repo} but cannot be downloaded{detail}")
    if code == "RepoNotFound" or status == 404:
        hint = "" if token else " (a private repository needs a token: --token or HF_TOKEN)"
        return HubError(f"repository {repo} not found{hint}{detail}")
    if status in (401, 403):
        if token:
            return HubError(f"the hub refused the token for {repo}{detail}")
        return HubError(f"{repo} needs authentication: pass a token with --token or HF_TOKEN{detail}")
    return HubError(f"the hub answered HTTP {status} for {response.request.url}{detail}")


def _body_error(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].strip()
    return str(body.get("error", "")) if isinstance(body, dict) else ""


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
        raise HubError(f"{file.path} arrived corrupt ({problem}); it was removed, run the same "
                       "command again to download it anew")


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
    return _size(dest.with_name(dest.name + PARTIAL_SUFFIX))


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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _range_start(content_range: Optional[str]) -> Optional[int]:
    m = re.match(r"bytes (\d+)-", content_range or "")
    return int(m.group(1)) if m else None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _remove_empty_parents(path: Path, stop: Path) -> None:
    while path != stop and stop in path.parents:
        try:
            path.rmdir()
        except OSError:
            return
        path = path.parent
