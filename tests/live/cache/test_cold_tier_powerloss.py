"""The cold tier across power cuts: on a file system that keeps only what was fsynced
(tests/support/powerloss_fs.py), a cut at any point leaves whole blocks or none, rows that name them and
an intact database, and a process restarted on that loads every block it indexes with the KV
that was written.

A SIGKILL cannot test this (test_cold_tier_crash.py): the page cache outlives a killed process, so
a missing fsync or a write straight to the final name goes unseen. Here the writer process is
killed and the file system then drops what a power cut loses; a new process restarts on the rest.
"""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cache.block_key import ModelFingerprint
from tests.support.cache import powerloss_writer
from tests.support.cache.powerloss import (
    REPO,
    PowerLossMount,
    fuse_unavailable,
    make_durable_dirs,
    surviving_state,
)

pytestmark = pytest.mark.skipif(fuse_unavailable() is not None, reason=fuse_unavailable() or "")

FP = ModelFingerprint(*powerloss_writer.FP_ARGS)

# Where the power goes (cut before the n-th such operation under the prefix) and what the disk
# had written back by itself (none / meta / random: tests/support/powerloss_fs.py): every step of a block's
# write under each kind of write-back; start-up ("early": armed before the restarted process
# reconciles); and SQLite's checkpoints (the rows are in WAL mode with synchronous=NORMAL, so a
# row is durable once a checkpoint syncs the WAL, every ~240 blocks here).
ROUNDS = [
    ("create", 2, "/cold", "none"),
    ("create", 3, "/cold", "meta"),
    ("create", 4, "/cold", "random"),
    ("write", 2, "/cold", "meta"),
    ("write", 3, "/cold", "random"),
    ("write", 5, "/cold", "none"),
    ("fsync", 2, "/cold", "meta"),
    ("fsync", 3, "/cold", "none"),
    ("fsync", 4, "/cold", "random"),
    ("rename", 2, "/cold", "none"),
    ("rename", 3, "/cold", "meta"),
    ("rename", 5, "/cold", "random"),
    ("fsyncdir", 3, "/cold", "none"),
    ("fsyncdir", 4, "/cold", "meta"),
    ("fsyncdir", 6, "/cold", "random"),
    ("any", 3, "/", "random", "early"),
    ("any", 40, "/", "meta", "early"),
    ("unlink", 1, "/", "none", "early"),
    ("fsync", 2, "/home", "none"),
    ("write", 3, "/home/omlx.sqlite3", "random"),
    ("fsync", 3, "/home", "meta"),
]


def _env(mount: Path, tmp_path: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMLX_HOME": str(mount / "home"),
        "OMLX_DATABASE": str(mount / "home" / "omlx.sqlite3"),
        "OMLX_LOG_LEVEL": "ERROR",
        "OMLX_LOG_DIR": str(tmp_path / "logs"),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


class _Writer:
    """The fork server of tests/support/cache/powerloss_writer.py, one child (the machine) per round."""

    def __init__(self, root: Path, env: dict, log: Path):
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(powerloss_writer.__file__)), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),
            env=env,
            cwd=REPO,
            text=True,
        )
        self.reports = []
        self.child = None
        self.watchdog = threading.Timer(300, self.proc.kill)  # a hang fails the test, not the run
        self.watchdog.start()
        self.next("ready")

    def next(self, kind):
        while True:
            line = self.proc.stdout.readline()
            assert line, f"writer died: {self.log.read_text()[-3000:]}"
            msg = json.loads(line)
            if "verified" in msg:
                self.reports.append(msg)
            if kind in msg:
                return msg
            assert "reaped" not in msg, f"a round ended early: {self.log.read_text()[-3000:]}"

    def start(self, arg) -> int:
        self.proc.stdin.write(f"{arg}\n")
        self.proc.stdin.flush()
        self.child = self.next("pid")["pid"]
        return self.child

    def kill_child(self):
        """The power goes: the machine stops at once."""
        os.kill(self.child, signal.SIGKILL)
        self.next("reaped")
        self.child = None

    def stop(self):
        if self.child is not None:  # a round that failed: its child still writes
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.watchdog.cancel()


def _power_cut_rounds(tmp_path, rounds, seed, two=False):
    """Run the rounds; returns (violations, reports, lost) for the caller's assertions."""
    with PowerLossMount(tmp_path) as fs:
        mount = fs.path
        make_durable_dirs(mount, "home", "cold")
        writer = _Writer(mount / "cold", _env(mount, tmp_path), tmp_path / "writer.log")
        try:
            violations, lost, survived = [], [], []
            for i, (kind, n, prefix, mode, *early) in enumerate(rounds):
                if early:
                    fs.arm(kind, n, prefix)
                reports = len(writer.reports)
                writer.start(f"two:{seed * 1000 + i}" if two else seed * 1000 + i)
                if not early:
                    while len(writer.reports) == reports:  # restarted and checked: now cut
                        writer.next("verified")
                    fs.arm(kind, n, prefix)
                frozen = fs.wait_frozen()
                writer.kill_child()
                lost.append(fs.cut(mode, seed * 1000 + i))
                if frozen is None:
                    violations.append(f"the writer never came to {kind} #{n} under {prefix}")
                    break
                found, blocks, rows = surviving_state(
                    mount / "cold", mount / "home" / "omlx.sqlite3", FP.hex, powerloss_writer.kv_for
                )
                survived.append((len(blocks), len(rows)))
                violations += [f"cut before {frozen['before']} {frozen['path']} ({mode}): {v}" for v in found]
            writer.start("verify")
            writer.next("reaped")
        finally:
            writer.stop()
    print(
        f"\n{len(rounds)} power cuts; (blocks, rows) on disk after each: {survived}; lost (names, files) "
        f"at each: {[(x['names'], x['files']) for x in lost]}"
    )
    return violations, writer.reports, lost


def test_power_cut_at_every_step_leaves_whole_blocks_rows_that_name_them_and_an_intact_database(tmp_path):
    violations, reports, lost = _power_cut_rounds(tmp_path, ROUNDS, seed=1)
    assert violations == [], f"{len(violations)} violations:\n" + "\n".join(violations[:30])
    # Every restart (the next round's process) found what it indexed loadable and right.
    assert len(reports) >= len(ROUNDS) - 2
    bad = [r for r in reports if not (r["db"] and r["rows_match"] and r["wrong"] == 0 and r["missing"] == 0)]
    assert bad == []
    # The cuts were not empty: un-synced changes were lost, and blocks survived them.
    assert sum(1 for x in lost if x["names"] or x["files"]) >= len(ROUNDS) // 2
    assert reports[-1]["verified"] > 0


def test_two_writers_on_one_folder_survive_power_cuts(tmp_path):
    """Two workers sharing the folder (docs/operations.md) write the same blocks at once: each
    through its own temp file and rename, so a cut leaves whole blocks and rows that name them."""
    rounds = [ROUNDS[i] for i in (1, 4, 6, 9, 13, 15)]
    violations, reports, lost = _power_cut_rounds(tmp_path, rounds, seed=3, two=True)
    assert violations == [], f"{len(violations)} violations:\n" + "\n".join(violations[:30])
    assert all(r["db"] and r["rows_match"] and r["wrong"] == 0 and r["missing"] == 0 for r in reports)
    assert reports[-1]["verified"] > 0


def _random_round(rng):
    """A cut at a random point of a kind the writer reaches (WAL mode never unlinks a journal,
    and a sync under /home needs a checkpoint, ~240 blocks, so those are kept few)."""
    mode = rng.choice(["none", "meta", "random"])
    if rng.random() < 0.15:
        return ("any", rng.randint(1, 60), "/", mode, "early")
    if rng.random() < 0.06:
        return (rng.choice(["fsync", "write"]), rng.randint(1, 3), "/home", mode)
    return (
        rng.choice(["create", "write", "fsync", "rename", "fsyncdir", "any"]),
        rng.randint(1, 12),
        "/cold",
        mode,
    )


@pytest.mark.slow
def test_power_cuts_at_random_points(tmp_path):
    rng = random.Random(7)
    rounds = [_random_round(rng) for _ in range(100)]
    violations, reports, lost = _power_cut_rounds(tmp_path, rounds, seed=2)
    assert violations == [], f"{len(violations)} violations:\n" + "\n".join(violations[:30])
    assert all(r["db"] and r["rows_match"] and r["wrong"] == 0 and r["missing"] == 0 for r in reports)
    assert reports[-1]["verified"] > 0
