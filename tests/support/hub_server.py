"""A local HTTP server standing in for the Hugging Face hub (the one outside boundary of `omlx
pull` and of huggingface_hub's downloads), speaking the part of the hub's HTTP API that
huggingface_hub uses:

- ``GET /api/models/ORG/NAME/revision/REV`` (``?blobs=true``): ``sha`` (the commit) and
  ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs``).
- ``GET /api/models/ORG/NAME/tree/REV`` (``?recursive=true``): the files and folders, as
  ``HfApi.list_repo_tree`` reads them (``type``, ``path``, ``size``, ``oid``, ``lfs.oid``).
- ``HEAD`` / ``GET /ORG/NAME/resolve/REV/PATH``: ``X-Repo-Commit``, ``ETag`` (the git blob sha1),
  ``Content-Length``; an LFS file (``*.safetensors``) answers a 302 to a "CDN" on another host name
  with ``X-Linked-Etag`` (its sha256) and ``X-Linked-Size``, as the hub does.
- ``/cdn/...``: the LFS bytes, with ``Range`` (206, ``Content-Range``; 416 past the end).
- Errors with the hub's ``X-Error-Code`` / ``X-Error-Message`` headers: 404 RepoNotFound,
  RevisionNotFound, EntryNotFound; 401 GatedRepo when a gated repo's files are asked for without
  its token (its file list is public, as on the hub).

It records every request and every byte it sends, and can drop a file's download part way (once,
or every time), stall it, serve other bytes than it lists, or ignore Range.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors",)


def blob_id(data: bytes) -> str:
    """git's object id of a file: what the hub lists as ``blobId`` / ``oid``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    files: Dict[str, bytes]
    commit: str
    token: Optional[str] = None  # gated: this token is required

    def sibling(self, path: str) -> dict:
        data = self.files[path]
        entry = {"rfilename": path, "size": len(data), "blobId": blob_id(data)}
        if path.endswith(LFS_SUFFIXES):
            entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 130}
        return entry

    def tree(self) -> List[dict]:
        folders = sorted({"/".join(p.split("/")[:i]) for p in self.files for i in range(1, p.count("/") + 1)})
        entries = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in folders]
        for path in sorted(self.files):
            data = self.files[path]
            entry = {"type": "file", "oid": blob_id(data), "size": len(data), "path": path}
            if path.endswith(LFS_SUFFIXES):
                entry["lfs"] = {
                    "oid": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 130,
                }
            entries.append(entry)
        return entries


@dataclass
class Sent:
    method: str
    path: str  # the request path
    range: Optional[str]
    authorization: Optional[str]
    status: int
    body_bytes: int = 0


@dataclass
class HubServer:
    repos: Dict[str, Repo] = field(default_factory=dict)
    log: List[Sent] = field(default_factory=list)
    drop_after: Dict[str, int] = field(default_factory=dict)  # file path -> bytes, once
    stall_after: Dict[str, int] = field(default_factory=dict)  # file path -> bytes, once
    release: threading.Event = field(default_factory=threading.Event)
    corrupt: Dict[str, bytes] = field(default_factory=dict)  # file path -> bytes served instead
    ignore_range: set = field(default_factory=set)
    drop_always: set = field(
        default_factory=set
    )  # file paths whose GETs die before a byte (after drop_after)

    def __post_init__(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the hub: huggingface_hub reuses connections

            def do_GET(self):
                hub._handle(self, head=False)

            def do_HEAD(self):
                hub._handle(self, head=True)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add_repo(
        self, repo: str, folder: Path, commit: str = "0" * 39 + "1", token: Optional[str] = None
    ) -> Repo:
        files = {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(Path(folder).rglob("*"))
            if p.is_file()
        }
        self.repos[repo] = Repo(files, commit, token)
        return self.repos[repo]

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def sent_for(self, suffix: str) -> List[Sent]:
        """The GETs of a path ending in ``suffix`` that were answered with bytes (200 or 206)."""
        return [
            s for s in self.log if s.method == "GET" and s.path.endswith(suffix) and s.status in (200, 206)
        ]

    # -- the hub ------------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        sent = Sent(
            "HEAD" if head else "GET", path, h.headers.get("Range"), h.headers.get("Authorization"), 0
        )
        self.log.append(sent)
        parts = path.strip("/").split("/")
        if parts[0] == "cdn":  # where LFS files are redirected: no auth, as a signed CDN URL
            repo = self.repos.get(f"{parts[1]}/{parts[2]}")
            file = "/".join(parts[3:])
            if repo is None or file not in repo.files:
                return self._error(h, sent, 404, "EntryNotFound", "no such object", head)
            return self._file(h, sent, file, repo, head)
        if (
            parts[0] == "api"
            and len(parts) >= 6
            and parts[1] == "models"
            and parts[4] in ("revision", "tree")
        ):
            # As on the hub, a gated repo's file list is public; its files are not.
            repo = self._repo(h, sent, f"{parts[2]}/{parts[3]}", parts[5], head, gate=False)
            if repo is None:
                return
            if parts[4] == "revision":
                body = {
                    "id": f"{parts[2]}/{parts[3]}",
                    "sha": repo.commit,
                    "siblings": [repo.sibling(p) for p in repo.files],
                }
            else:
                body = repo.tree()
            return self._send(
                h, sent, 200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head
            )
        if len(parts) >= 5 and parts[2] == "resolve":
            name, rev, file = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
            repo = self._repo(h, sent, name, rev, head)
            if repo is None:
                return
            if file not in repo.files:
                return self._error(
                    h,
                    sent,
                    404,
                    "EntryNotFound",
                    f"{file} does not exist",
                    head,
                    {"X-Repo-Commit": repo.commit},
                )
            data = repo.files[file]
            if file.endswith(LFS_SUFFIXES):
                # Another host name for the same server, as the hub's CDN is another host.
                return self._send(
                    h,
                    sent,
                    302,
                    b"",
                    {
                        "Location": f"http://localhost:{self.httpd.server_address[1]}/cdn/{name}/{file}",
                        "X-Repo-Commit": repo.commit,
                        "X-Linked-Size": str(len(data)),
                        "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                        "ETag": f'"{blob_id(data)}"',
                    },
                    head,
                )
            return self._file(h, sent, file, repo, head)
        self._error(h, sent, 404, None, "not found", head)

    def _repo(self, h, sent, name: str, rev: str, head: bool, gate: bool = True) -> Optional[Repo]:
        repo = self.repos.get(name)
        if repo is None:
            self._error(h, sent, 404, "RepoNotFound", "Repository not found", head)
            return None
        if gate and repo.token is not None and h.headers.get("Authorization") != f"Bearer {repo.token}":
            self._error(h, sent, 401, "GatedRepo", "Access to this model is restricted", head)
            return None
        if rev not in ("main", repo.commit):
            self._error(h, sent, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return None
        return repo

    def _file(self, h, sent, file: str, repo: Repo, head: bool) -> None:
        data = self.corrupt.get(file, repo.files[file])
        start = 0
        rng = None if file in self.ignore_range else h.headers.get("Range")
        lfs = file.endswith(LFS_SUFFIXES)
        headers = {
            "ETag": f'"{hashlib.sha256(data).hexdigest() if lfs else blob_id(data)}"',
            "Accept-Ranges": "bytes",
            "X-Repo-Commit": repo.commit,
        }
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return self._send(h, sent, 416, b"", {"Content-Range": f"bytes */{len(data)}"}, head)
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        status = 206 if rng else 200
        limit = None if head else self.drop_after.pop(file, None)
        if not head and limit is None and file in self.drop_always:
            limit = 0
        stall = None if head else self.stall_after.pop(file, None)
        if limit is None and stall is None:
            return self._send(h, sent, status, body, headers, head)
        cut = limit if limit is not None else stall
        sent.status = status
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[:cut])
        h.wfile.flush()
        sent.body_bytes = cut
        if stall is not None:
            self.release.wait(120)
        h.close_connection = True  # the client sees the connection end inside the body

    def _error(
        self,
        h,
        sent,
        status: int,
        code: Optional[str],
        message: str,
        head: bool,
        extra: Optional[dict] = None,
    ) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._send(h, sent, status, json.dumps({"error": message}).encode(), headers, head)

    def _send(self, h, sent, status: int, body: bytes, headers: dict, head: bool = False) -> None:
        sent.status = status
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)
            sent.body_bytes = len(body)
