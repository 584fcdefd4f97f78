"""A local HTTP server standing in for the Hugging Face hub (the one outside boundary of `omlx
pull`): the model info API and the resolve endpoint, LFS files behind a redirect to a "CDN" path,
HTTP Range, gated and missing repos with the hub's X-Error-Code headers. It records every request
and every byte it sends, and can drop or stall a file's first download part way."""
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


@dataclass
class Repo:
    files: Dict[str, bytes]
    commit: str
    token: Optional[str] = None  # gated: this token is required

    def sibling(self, path: str) -> dict:
        data = self.files[path]
        entry = {"rfilename": path, "size": len(data),
                 "blobId": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
        if path.endswith(LFS_SUFFIXES):
            entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 130}
        return entry


@dataclass
class Sent:
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
    drop_always: set = field(default_factory=set)  # file paths served whole (200) despite Range

    def __post_init__(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hub._handle(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add_repo(self, repo: str, folder: Path, commit: str = "0" * 39 + "1",
                 token: Optional[str] = None) -> Repo:
        files = {p.relative_to(folder).as_posix(): p.read_bytes()
                 for p in sorted(Path(folder).rglob("*")) if p.is_file()}
        self.repos[repo] = Repo(files, commit, token)
        return self.repos[repo]

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def sent_for(self, suffix: str) -> List[Sent]:
        return [s for s in self.log if s.path.endswith(suffix) and s.status in (200, 206)]

    # -- the hub ------------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        sent = Sent(path, h.headers.get("Range"), h.headers.get("Authorization"), 0)
        self.log.append(sent)
        parts = path.strip("/").split("/")
        if parts[0] == "cdn":  # where LFS files are redirected: no auth, as a signed CDN URL
            repo = self.repos.get(f"{parts[1]}/{parts[2]}")
            file = "/".join(parts[3:])
            if repo is None or file not in repo.files:
                return self._error(h, sent, 404, "EntryNotFound", "no such object")
            return self._file(h, sent, file, repo.files[file])
        if parts[0] == "api" and len(parts) == 6 and parts[1] == "models" and parts[4] == "revision":
            # As on the hub, a gated repo's file list is public; its files are not.
            repo = self._repo(h, sent, f"{parts[2]}/{parts[3]}", parts[5], gate=False)
            if repo is not None:
                body = json.dumps({"id": f"{parts[2]}/{parts[3]}", "sha": repo.commit,
                                   "siblings": [repo.sibling(p) for p in repo.files]}).encode()
                self._send(h, sent, 200, body, {"Content-Type": "application/json"})
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            name, rev, file = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
            repo = self._repo(h, sent, name, rev)
            if repo is None:
                return
            if file not in repo.files:
                return self._error(h, sent, 404, "EntryNotFound", f"{file} does not exist")
            if file.endswith(LFS_SUFFIXES):
                sent.status = 302
                h.send_response(302)
                # Another host name for the same server, as the hub's CDN is another host.
                h.send_header("Location", f"http://localhost:{self.httpd.server_address[1]}/cdn/{name}/{file}")
                h.send_header("X-Linked-Size", str(len(repo.files[file])))
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            return self._file(h, sent, file, repo.files[file])
        self._error(h, sent, 404, None, "not found")

    def _repo(self, h, sent, name: str, rev: str, gate: bool = True) -> Optional[Repo]:
        repo = self.repos.get(name)
        if repo is None:
            self._error(h, sent, 404, "RepoNotFound", "Repository not found")
            return None
        if gate and repo.token is not None and h.headers.get("Authorization") != f"Bearer {repo.token}":
            self._error(h, sent, 401, "GatedRepo", "Access to this model is restricted")
            return None
        if rev not in ("main", repo.commit):
            self._error(h, sent, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo

    def _file(self, h, sent, file: str, data: bytes) -> None:
        data = self.corrupt.get(file, data)
        start = 0
        rng = None if file in self.ignore_range else h.headers.get("Range")
        headers = {"ETag": f'"{hashlib.sha256(data).hexdigest()}"', "Accept-Ranges": "bytes"}
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                sent.status = 416
                return self._send(h, sent, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        status = 206 if rng else 200
        limit = self.drop_after.pop(file, None)
        if file in self.drop_always:  # a connection that dies after a few bytes every time
            limit = 1000
        stall = self.stall_after.pop(file, None)
        if limit is None and stall is None:
            return self._send(h, sent, status, body, headers)
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

    def _error(self, h, sent, status: int, code: Optional[str], message: str) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(h, sent, status, json.dumps({"error": message}).encode(), headers)

    def _send(self, h, sent, status: int, body: bytes, headers: dict) -> None:
        sent.status = status
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        sent.body_bytes = len(body)
