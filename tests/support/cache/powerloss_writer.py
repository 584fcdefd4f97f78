"""The machine that loses power: writes KV blocks through the real cold tier until it is killed.

``python tests/support/cache/powerloss_writer.py ROOT`` is a fork server (imports once, forks a fresh
process per round, as a restart would start one). Each line ``SEED`` on stdin starts a round: the
child opens a ColdTier on ROOT (reconciliation: the restart after the previous cut), loads every
block it indexed and compares it with ``kv_for``, reports, then writes random chains of blocks
until it is killed. ``verify`` instead of a seed starts a round that only checks; ``two:SEED``
one where, after the check, a second process (a second worker on the same folder) opens its own
ColdTier there and writes the same chains at the same time, so that both write the same blocks.
Replies on
stdout, one JSON object per line: ``ready``, ``pid``, the child's report, ``reaped``.
"""

import json
import os
import random
import sys
import traceback

import numpy as np

FP_ARGS = ("weights-powerloss", "tok", "float32", "kv:2x2x8", 32)
TOKENS = 32  # 4 KiB of KV per layer: a block file spans 3 pages, so a torn file can have a valid header


def kv_for(key: bytes, n: int):
    """The block's KV as numpy arrays, determined by its key: contents checkable from the key alone."""
    rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
    return [tuple(rng.standard_normal((1, 2, n, 8)).astype(np.float32) for _ in "kv") for _ in range(2)]


def say(**msg):
    print(json.dumps(msg), flush=True)


def round_(root, seed, two=False):
    import mlx.core as mx

    from cache.block_key import ModelFingerprint, block_key
    from cache.block_pool import KVBlock
    from cache.cold_tier import ColdTier

    fp = ModelFingerprint(*FP_ARGS)
    tier = ColdTier(root, fp, max_queue=8)
    if not tier.enabled:  # the mount refused I/O (a cut armed before the restart): no report
        raise RuntimeError("the cold tier could not use its directory")
    verified = wrong = missing = 0
    for key_hex in tier.snapshot():
        key = bytes.fromhex(key_hex)
        e = tier.entry(key)
        layers = tier.load(key)
        if layers is None:
            missing += 1
            continue
        same = block_key(e.parent, e.token_ids) == key and all(
            np.array_equal(np.array(g), w)
            for gl, wl in zip(layers, kv_for(key, len(e.token_ids)))
            for g, w in zip(gl, wl)
        )
        verified += same
        wrong += not same
    rows_match = tier.index is not None and set(tier.index.rows_for(fp.hex)) == set(tier.snapshot())
    say(verified=verified, wrong=wrong, missing=missing, rows_match=rows_match, db=tier.index is not None)
    if seed is None:
        tier.close()
        return
    if two and os.fork() == 0:  # the second writer: dies with the first (the machine)
        from tests.support.cache.powerloss import die_with_parent

        die_with_parent()
        tier = ColdTier(root, fp, max_queue=8)
    rng = random.Random(seed)
    while True:
        parent = fp.root_key()
        for _ in range(rng.randint(1, 4)):
            tokens = tuple(rng.randrange(1000) for _ in range(TOKENS))
            key = block_key(parent, tokens)
            layers = [tuple(mx.array(a) for a in kv) for kv in kv_for(key, TOKENS)]
            tier.put(KVBlock(key, parent, tokens, layers, 0))
            parent = key
        tier.flush()


def main(root):
    from tests.support.cache.powerloss import die_with_parent

    die_with_parent()
    import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)
    from django.db import connections

    from cache import orm_index

    orm_index.setup()  # migrates the database on the mount once, before any cut
    # No file of the mount stays open here (the children open their own); closing the last
    # connection checkpoints the WAL into the database file and syncs it: the tables are durable.
    connections.close_all()
    say(ready=True)
    for line in sys.stdin:
        arg = line.strip()
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent()
                two = arg.startswith("two:")
                seed = None if arg == "verify" else int(arg.split(":")[-1])
                round_(root, seed, two)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(0)
        say(pid=pid)
        os.waitpid(pid, 0)
        say(reaped=pid)


if __name__ == "__main__":
    main(sys.argv[1])
