"""Power cuts for tests: a PowerLossFS mount (tests/support/powerloss_fs.py) and the checks of what survives.

``PowerLossMount(dir)`` runs the file system in a process of its own, mounted at ``dir/mnt``;
``arm`` / ``wait_frozen`` / ``cut`` drive it, and leaving the ``with`` block (a failing test
included) stops it and makes sure nothing stays mounted. ``surviving_state`` checks, after a
cut and before anything reconciles, what the cold tier promises of the disk: every block file is
whole and holds the KV that was written, every row names such a file, and the database is intact.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
from safetensors.numpy import load as load_safetensors

from cache import block_file
from cache.block_file import BLOCK_NAME, SHARD_DIR, InvalidBlockFile

REPO = Path(__file__).resolve().parents[3]
FS_SCRIPT = REPO / "tests" / "support" / "powerloss_fs.py"


def fuse_unavailable() -> str | None:
    """Why a FUSE file system cannot be mounted here, or None. Only a missing kernel device is a
    reason to skip; a missing fusermount3 or libfuse3 is an install error the test reports."""
    if sys.platform != "linux":
        return f"FUSE power-loss tests need Linux (this is {sys.platform})"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: this kernel or container offers no FUSE"
    return None


def make_durable_dirs(mount: Path, *names) -> None:
    """Make the directories the processes use, durably (as an installed system has them)."""
    for name in names:
        (mount / name).mkdir()
    fd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def die_with_parent() -> None:
    """In a child process (``preexec_fn``, or after a fork): if its parent dies, so does it, so
    no writer outlives its test and keeps a mount busy."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class PowerLossMount:
    def __init__(self, workdir: Path):
        self.path = Path(workdir) / "mnt"
        self.path.mkdir(parents=True, exist_ok=True)
        self.log = Path(workdir) / "powerloss_fs.log"
        self._replies: "queue.Queue" = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, str(FS_SCRIPT), str(self.path)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.log, "w"),
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        self._expect("mounted")

    def _read(self):
        for line in self.proc.stdout:
            self._replies.put(json.loads(line))
        self._replies.put({"exited": self.proc.wait()})

    def _expect(self, kind: str, timeout: float = 60):
        try:
            msg = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"power-loss FS: no {kind!r} within {timeout} s; log: {self._log_tail()}")
        assert kind in msg, f"power-loss FS said {msg}, expected {kind!r}; log: {self._log_tail()}"
        return msg[kind]

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def _send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def arm(self, kind: str, n: int, prefix: str = "/") -> None:
        """Cut the power right before the n-th ``kind`` operation under ``prefix`` (mount-relative)."""
        self._send(f"arm {kind} {n} {prefix}")
        self._expect("armed")

    def wait_frozen(self, timeout: float = 30):
        """Where the armed cut happened, or None if it did not within ``timeout`` seconds."""
        try:
            msg = self._replies.get(timeout=timeout)
        except queue.Empty:
            return None
        assert "frozen" in msg, f"power-loss FS said {msg}, expected 'frozen'; log: {self._log_tail()}"
        return msg["frozen"]

    def cut(self, mode: str, seed: int = 0) -> dict:
        """Drop what did not survive (tests/support/powerloss_fs.py: none, meta, random) and remount.
        Every process using the mount must be dead. Returns what was lost."""
        self._send(f"cut {mode} {seed}")
        return self._expect("mounted")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send("stop")
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if os.path.ismount(self.path):  # the FS died without unmounting: never leave a dead mount
            subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def surviving_state(cold_root: Path, database: Path, fingerprint_hex: str, kv_for=None) -> tuple:
    """(violations, blocks, rows) of the state a power cut left, checked before any restart.

    A block file (``<key>.safetensors``) must be whole: a valid header for its place, tensors that
    parse, and, given ``kv_for``, equal to ``kv_for(key, tokens)``. The database must pass
    SQLite's integrity check, and every row of the model must name a block file that is there. Temp
    files are allowed (start-up removes them). The tests only write, so a row without its file can
    only come from a block
    whose file was not durable before its row (a GC, which removes the file first, could leave one
    legitimately).
    """
    from cache.models import CacheBlock  # (the table's name; needs Django set up, as under pytest)

    violations, blocks = [], set()
    model_dir = cold_root / fingerprint_hex
    for shard in sorted(model_dir.iterdir()) if model_dir.is_dir() else []:
        if not (SHARD_DIR.match(shard.name) and shard.is_dir()):
            continue
        for f in sorted(shard.iterdir()):
            m = BLOCK_NAME.match(f.name)
            if m is None:
                continue
            try:
                header = block_file.read_header(f, fingerprint_hex, m.group(1))
                arrays = load_safetensors(f.read_bytes())
                want = kv_for(header.key, len(header.token_ids)) if kv_for else []
                for i, (k, v) in enumerate(want):
                    if not (np.array_equal(arrays[f"l{i}.k"], k) and np.array_equal(arrays[f"l{i}.v"], v)):
                        raise InvalidBlockFile(f"layer {i} holds other KV than was written")
            except (OSError, InvalidBlockFile, KeyError, ValueError) as err:
                violations.append(f"block file {shard.name}/{f.name[:16]}... is not whole: {err}")
                continue
            blocks.add(m.group(1))
    rows = {}
    if not database.exists():
        violations.append("the database file is gone")
    else:
        con = sqlite3.connect(database)  # rolls back a hot journal, as any next opener would
        try:
            check = con.execute("PRAGMA integrity_check").fetchall()
            if check != [("ok",)]:
                violations.append(f"database is damaged: {check[:5]}")
            table = CacheBlock._meta.db_table
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                rows = dict(
                    con.execute(
                        f'SELECT key, file FROM "{table}" WHERE model_fingerprint = ?', (fingerprint_hex,)
                    ).fetchall()
                )
            # else the migrations were not durable yet (no checkpoint): the next start migrates
        except sqlite3.DatabaseError as err:
            violations.append(f"database unreadable: {err}")
        finally:
            con.close()
    for key_hex, rel in rows.items():
        if key_hex not in blocks:
            what = "a missing file" if not (cold_root / rel).exists() else "a file that is not whole"
            violations.append(f"row {key_hex[:16]}... points at {what}")
    return violations, blocks, set(rows)
