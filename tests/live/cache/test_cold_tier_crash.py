"""The cold tier under SIGKILL at random moments and under a file size limit (EFBIG)."""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cache.cold_blocks import REPO, assert_same_kv, kv_for, tiers  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


WRITER = r"""
import inference  # noqa: F401
import json, os, random, sys, traceback
import numpy as np
import mlx.core as mx
from django.db import connections
from cache import orm_index
from cache.block_key import ModelFingerprint, block_key
from cache.block_pool import KVBlock
from cache.cold_tier import ColdTier

fp = ModelFingerprint("weights-a", "tok", "float32", "kv:2x2x8", 4)


def kv_for(key, n):
    rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
    return [tuple(mx.array(rng.standard_normal((1, 2, n, 8)).astype(np.float32)) for _ in "kv")
            for _ in range(2)]


def say(**msg):
    print(json.dumps(msg), flush=True)


def start_and_write(root, seed, mode):
    # A restart: reconcile, check everything loadable, then write blocks until killed.
    tier = ColdTier(root, fp, max_queue=8)
    verified = wrong = missing = 0
    for key_hex in tier.snapshot():
        key = bytes.fromhex(key_hex)
        e = tier.entry(key)
        layers = tier.load(key)
        if layers is None:
            missing += 1
            continue
        same = block_key(e.parent, e.token_ids) == key and all(
            np.array_equal(np.array(g), np.array(w))
            for gl, wl in zip(layers, kv_for(key, len(e.token_ids))) for g, w in zip(gl, wl))
        verified += same
        wrong += not same
    rows_match = tier.index is not None and set(tier.index.rows_for(fp.hex)) == set(tier.snapshot())
    say(verified=verified, wrong=wrong, missing=missing, rows_match=rows_match, db=tier.index is not None)
    if mode == "verify":
        tier.close()
        return
    rng = random.Random(seed)
    while True:
        parent = fp.root_key()
        for _ in range(rng.randint(1, 6)):
            tokens = tuple(rng.randrange(50) for _ in range(rng.choice((4, 4, 2))))
            key = block_key(parent, tokens)
            tier.put(KVBlock(key, parent, tokens, kv_for(key, len(tokens)), 0))
            parent = key
        tier.flush()


# A fork server: imports once, then forks one fresh process per round (cheap restarts).
root = sys.argv[1]
orm_index.setup()
connections.close_all()
say(ready=True)
for line in sys.stdin:
    seed, mode = line.split()
    pid = os.fork()
    if pid == 0:
        try:
            start_and_write(root, int(seed), mode)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)
    say(pid=pid)
    os.waitpid(pid, 0)
    say(reaped=pid)
"""


class _ForkServer:
    def __init__(self, script, root, env, log):
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),
            env=env,
            cwd=REPO,
            text=True,
        )
        self.reports = []
        self.watchdog = threading.Timer(120, self.proc.kill)  # a hang fails the test, not the run
        self.watchdog.start()
        self.next("ready")

    def next(self, kind):
        while True:
            line = self.proc.stdout.readline()
            assert line, f"fork server died: {Path(self.log).read_text()[-3000:]}"
            msg = json.loads(line)
            if "verified" in msg:
                self.reports.append(msg)
            if kind in msg:
                return msg
            assert "reaped" not in msg, f"a round ended early: {Path(self.log).read_text()[-3000:]}"

    def stop(self):
        self.proc.stdin.close()
        code = self.proc.wait(60)
        self.watchdog.cancel()
        return code

    def round(self, seed, mode):
        self.proc.stdin.write(f"{seed} {mode}\n")
        self.proc.stdin.flush()
        return self.next("pid")["pid"]


def test_sigkill_at_random_moments_leaves_a_consistent_cache(tmp_path, tiers):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    root, home = tmp_path / "cold", tmp_path / "home"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMLX_HOME": str(home),
        "OMLX_DATABASE": str(home / "omlx.sqlite3"),
        "OMLX_LOG_LEVEL": "ERROR",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    server = _ForkServer(script, root, env, tmp_path / "server.log")
    rng = random.Random(1234)
    rounds, torn = 24, 0
    for seed in range(rounds):
        reports = len(server.reports)
        pid = server.round(seed, "write")
        if seed % 4 != 3:  # now and then at any moment from the start, reconciliation included
            while len(server.reports) == reports:
                server.next("verified")
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(pid, signal.SIGKILL)
        server.next("reaped")
        torn += len(list(root.rglob("*.tmp")))  # kills that landed inside a write
    server.round(0, "verify")
    server.next("reaped")
    assert server.stop() == 0
    reports = server.reports
    print(
        f"\nSIGKILL x{rounds} ({torn} inside a write): blocks verified at each restart "
        f"{[r['verified'] for r in reports]}"
    )
    assert len(reports) >= rounds * 3 // 4 + 1
    assert all(r["db"] and r["rows_match"] and r["wrong"] == 0 and r["missing"] == 0 for r in reports)
    assert reports[-1]["verified"] > 0
    assert not list(root.rglob("*.tmp"))
    # This process (another database: every file is re-indexed from its header) agrees.
    tier = tiers(root=root)
    assert tier.stats.files == reports[-1]["verified"]
    for key_hex in tier.snapshot():
        e = tier.entry(bytes.fromhex(key_hex))
        assert_same_kv(tier.load(e.key), kv_for(e.key, e.num_tokens))


FSIZE = r"""
import inference  # noqa: F401
import json, resource, sys
import mlx.core as mx
from cache.block_key import ModelFingerprint, block_key
from cache.block_pool import KVBlock
from cache.cold_tier import ColdTier

fp = ModelFingerprint("weights-a", "tok", "float32", "kv:2x2x8", 64)
tier = ColdTier(sys.argv[1], fp)
def block(t):
    tokens = tuple([t] * 64)
    key = block_key(fp.root_key(), tokens)
    return KVBlock(key, fp.root_key(), tokens, [(mx.ones((1, 2, 64, 8)), mx.ones((1, 2, 64, 8)))] * 2, 0)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # files cannot grow past 4 KiB: EFBIG
tier.put(block(1)); tier.flush()
full = (tier.stats.write_errors, tier.contains(block(1).key))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
tier.put(block(2)); tier.flush()
print(json.dumps({"full": full, "after": [tier.stats.writes, tier.contains(block(2).key)]}))
tier.close()
"""


def test_file_size_limit_fails_writes_without_killing_the_writer(tmp_path):
    script = tmp_path / "fsize.py"
    script.write_text(FSIZE)
    home = tmp_path / "home"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMLX_HOME": str(home),
        "OMLX_DATABASE": str(home / "omlx.sqlite3"),
        "OMLX_LOG_LEVEL": "ERROR",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "cold")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out == {"full": [1, False], "after": [1, True]}
    assert not list((tmp_path / "cold").rglob("*.tmp"))
