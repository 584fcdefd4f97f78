"""The console's model downloads: `omlx pull ORG/NAME --progress json` run by the server, one
child process per download, watched by a thread of the server.

Why a child process and not Huey or a thread running the pull: the download is the same code as
`omlx pull`, literally, and cancelling it is a signal that takes effect at once, even while a read
from the hub is stalled. Cancel sends SIGINT (the pull stops as on Ctrl-C: what arrived stays in
its staging folder, which discovery never sees); a child that is still there after KILL_AFTER
seconds gets SIGKILL (what arrived is on disk as well: the pull writes unbuffered). Resume starts
the same pull again, which continues from the staging folder (inference/hub.py).

Lifecycle: ``get_downloads()`` makes the process's one ``Downloads`` on first use; `omlx serve`
calls ``close_downloads()`` as it stops, which cancels what runs. Downloads left unfinished (a
cancel, an error, a stopped server) are found again from their staging folders
(``MODEL_DIR/.omlx-pull/ORG/NAME``) and listed as interrupted, with Resume.

Every change bumps ``version``; the Downloads page's websocket (admin_panel/consumers/downloads.py)
waits for it and pushes the list.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from inference.hub import MANIFEST, STAGING_DIR, check_repo_id

logger = logging.getLogger("omlx.admin")

KILL_AFTER = 10.0  # seconds between SIGINT and SIGKILL on cancel
ACTIVE = ("starting", "running", "cancelling")


@dataclass
class Download:
    """One download, as the page shows it. ``state``: starting, running, cancelling, done, failed,
    cancelled."""

    id: int
    repo: str
    revision: str
    model_dir: Path
    state: str = "starting"
    total: int = 0
    done: int = 0
    resumed_from: int = 0  # bytes that were already there when it started
    files: int = 0
    files_done: int = 0
    file: str = ""
    message: str = ""
    path: str = ""
    commit: str = ""
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    cancel_requested: bool = False

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 0.0


@dataclass
class Interrupted:
    """A staging folder with no download running: a pull that can be resumed."""

    repo: str
    revision: str
    model_dir: Path
    bytes_here: int


class Downloads:
    def __init__(self):
        self._lock = threading.Condition()
        self._items: Dict[int, Download] = {}
        self._next_id = 1
        self.version = 0
        self._closed = False

    # -- actions -------------------------------------------------------------------------------

    def start(self, repo: str, revision: str, model_dir: Path) -> Download:
        """Start pulling ``repo``; ValueError for a bad repo id or revision, or one that runs."""
        repo = check_repo_id(repo.strip())
        revision = (revision or "").strip() or "main"
        if len(revision) > 200 or any(c.isspace() for c in revision):
            raise ValueError(f"{revision!r} is not a revision (a branch, tag or commit)")
        with self._lock:
            if self._closed:
                raise ValueError("the server is stopping")
            if any(d.repo == repo and d.active for d in self._items.values()):
                raise ValueError(f"{repo} is being downloaded already")
            for old in [d for d in self._items.values() if d.repo == repo]:  # resumed: one row per repo
                del self._items[old.id]
            download = Download(self._next_id, repo, revision, Path(model_dir))
            self._next_id += 1
            self._items[download.id] = download
            self._changed()
        command = [
            sys.executable,
            "-m",
            "omlx_site.cli",
            "pull",
            repo,
            "--revision",
            revision,
            "--model-dir",
            str(model_dir),
            "--progress",
            "json",
        ]
        try:
            # Its own session: a Ctrl-C meant for the server's terminal reaches it only through us.
            download.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
        except OSError as exc:
            self._end(download, "failed", f"cannot start `omlx pull`: {exc}")
            return download
        if download.cancel_requested:  # cancelled while the process was being started
            self._interrupt(download.process)
        threading.Thread(
            target=self._watch, args=(download,), name=f"omlx-download-{download.id}", daemon=True
        ).start()
        return download

    def cancel(self, download_id: int) -> Download:
        with self._lock:
            download = self._items.get(download_id)
            if download is None:
                raise KeyError(download_id)
            if not download.active:
                raise ValueError(f"{download.repo} is not downloading ({download.state})")
            download.cancel_requested = True
            download.state = "cancelling"
            self._changed()
            process = download.process
        if process is not None:
            self._interrupt(process)
        return download

    def forget(self, download_id: int) -> None:
        """Drop a finished, failed or cancelled download from the list."""
        with self._lock:
            download = self._items.get(download_id)
            if download is not None and not download.active:
                del self._items[download_id]
                self._changed()

    def close(self) -> None:
        """Cancel every download (the server is stopping) and wait for them to end."""
        with self._lock:
            self._closed = True
            running = [d for d in self._items.values() if d.active and d.process is not None]
        for download in running:
            download.cancel_requested = True
            self._interrupt(download.process)
        for download in running:
            try:
                download.process.wait(KILL_AFTER + 5)
            except subprocess.TimeoutExpired:
                pass

    # -- what the page shows -------------------------------------------------------------------

    def items(self) -> List[Download]:
        with self._lock:
            return sorted(self._items.values(), key=lambda d: -d.id)

    def interrupted(self, model_dir: Path) -> List[Interrupted]:
        """Staging folders under ``model_dir`` of no download in the list (run by this server)."""
        with self._lock:
            busy = {d.repo for d in self._items.values()}
        found = []
        root = Path(model_dir) / STAGING_DIR
        for manifest in sorted(root.glob(f"*/*/{MANIFEST}")):
            folder = manifest.parent
            repo = f"{folder.parent.name}/{folder.name}"
            if repo in busy:
                continue
            try:
                commit = json.loads(manifest.read_text()).get("commit") or "main"
            except (OSError, ValueError):
                commit = "main"
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
            found.append(Interrupted(repo, commit, Path(model_dir), size))
        return found

    def wait_change(self, since: int, timeout: float) -> int:
        """The version once it is not ``since`` (or after ``timeout`` seconds)."""
        with self._lock:
            self._lock.wait_for(lambda: self.version != since, timeout)
            return self.version

    # -- the watcher thread --------------------------------------------------------------------

    def _watch(self, download: Download) -> None:
        process = download.process
        errors: List[str] = []
        reader = threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True)
        reader.start()
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not an event (a library's stray print)
            if isinstance(event, dict):
                self._apply(download, event)
        code = process.wait()
        reader.join(5)
        if code == 0:
            self._end(download, "done", f"in the models list as {download.repo}")
            self._rescan()
        elif download.cancel_requested:
            self._end(download, "cancelled", "cancelled; what arrived is kept for Resume")
        else:
            last = next((e.strip() for e in reversed(errors) if e.strip()), f"exit code {code}")
            self._end(download, "failed", last.removeprefix("omlx pull: "))

    def _apply(self, download: Download, event: dict) -> None:
        kind = event.get("event")
        with self._lock:
            if kind == "start":
                download.total, download.files = event.get("total", 0), event.get("files", 0)
                download.done = download.resumed_from = event.get("done", 0)
                download.commit = event.get("commit", "")
                if download.state == "starting":
                    download.state = "running"
            elif kind == "file":
                download.file = event.get("path", "")
            elif kind == "file_done":
                download.files_done += 1
            elif kind == "finish":
                download.path = event.get("path", "")
            if isinstance(event.get("done"), int):
                download.done = event["done"]
            self._changed()

    def _end(self, download: Download, state: str, message: str) -> None:
        with self._lock:
            download.state, download.message = state, message
            self._changed()
        logger.info("download of %s %s: %s", download.repo, state, message)

    def _interrupt(self, process: subprocess.Popen) -> None:
        try:
            process.send_signal(signal.SIGINT)
        except ProcessLookupError:
            return

        def kill_later():
            try:
                process.wait(KILL_AFTER)
            except subprocess.TimeoutExpired:
                process.kill()

        threading.Thread(target=kill_later, daemon=True).start()

    def _changed(self) -> None:
        self.version += 1
        self._lock.notify_all()

    @staticmethod
    def _rescan() -> None:
        try:
            from inference.pool import get_pool

            get_pool().rescan()
        except Exception:  # the next look at the folders finds it anyway
            logger.exception("rescanning the model folders after a download failed")


_downloads: Optional[Downloads] = None
_downloads_lock = threading.Lock()


def get_downloads() -> Downloads:
    global _downloads
    with _downloads_lock:
        if _downloads is None:
            _downloads = Downloads()
        return _downloads


def close_downloads() -> None:
    with _downloads_lock:
        downloads = _downloads
    if downloads is not None:
        downloads.close()
