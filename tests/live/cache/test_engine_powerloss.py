"""An engine whose SSD tier lost power mid-write answers, after the restart, as one without a cache.

The engine (the LLM facade, a tiny random model) writes its KV blocks to a PowerLossFS mount
(tests/support/powerloss_fs.py) with its database there too; the power goes before one of the block
writes; a new process restarts on what survived, must serve some prompt tokens from the
SSD tier, and must produce the same tokens as an engine with the prefix cache off. (A missing
directory fsync shows in test_cold_tier_powerloss.py: under "meta" write-back every name survives,
and rows are durable only after a checkpoint, which this short run does not reach.)
"""

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)

import json
import os
import subprocess
import sys

import pytest

from tests.support.cache.powerloss import (
    REPO,
    PowerLossMount,
    die_with_parent,
    fuse_unavailable,
    make_durable_dirs,
    surviving_state,
)

pytestmark = pytest.mark.skipif(fuse_unavailable() is not None, reason=fuse_unavailable() or "")

SCRIPT = r"""
import inference, json, sys, time
from inference.engine import LLM, SamplingParams
path, ssd, mode = sys.argv[1], sys.argv[2], sys.argv[3]
params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
# Four prompts over one shared 32-token prefix: hits need the shared blocks and each prompt's own.
prompts = [list(range(10, 42)) + [100 + 7 * i + j for j in range(38)] for i in range(4)]

def run(llm):
    out = []
    for p in prompts:  # one by one: each prompt's blocks are written while the next one runs
        r = llm.generate([p], params)[0]
        out.append({"tokens": r.token_ids, "cold": r.usage.cold_cached_tokens})
        print(json.dumps({"done": len(out)}), flush=True)
    return out

with LLM(path, cache_block_size=16, paged_ssd_cache_dir=ssd) as llm:
    cached = run(llm)
    if mode == "write":
        time.sleep(600)  # the power goes while this process lives; it is killed
with LLM(path, prefix_cache=False) as llm:
    plain = run(llm)
print(json.dumps({"cached": cached, "plain": plain}), flush=True)
"""


def _engine(model, mount, tmp_path, mode):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMLX_HOME": str(mount / "home"),
        "OMLX_DATABASE": str(mount / "home" / "omlx.sqlite3"),
        "OMLX_LOG_LEVEL": "ERROR",
        "OMLX_LOG_DIR": str(tmp_path / "logs"),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(model), str(mount / "ssd"), mode],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / f"{mode}.log", "w"),
        text=True,
        preexec_fn=die_with_parent,
    )


def _fingerprint_dir(ssd):
    dirs = [d for d in ssd.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0].name


@pytest.mark.parametrize("mode", ["meta", pytest.param("random", marks=pytest.mark.slow)])
def test_engine_after_a_power_cut_answers_as_without_the_cache(model_dir, tmp_path, mode):
    model = model_dir(arch="qwen2", preset="tiny")
    with PowerLossMount(tmp_path) as fs:
        mount = fs.path
        make_durable_dirs(mount, "home", "ssd")
        # model.json takes the first write under ssd/, each block one or more: the power goes in
        # the middle of a block's write, after some blocks are complete.
        fs.arm("write", 12, "/ssd")
        writer = _engine(model, mount, tmp_path, "write")
        try:
            frozen = fs.wait_frozen(240)
        finally:
            writer.kill()
            writer.wait()
        assert frozen is not None, (tmp_path / "write.log").read_text()[-3000:]
        fs.cut(mode, seed=3)
        # The KV a block should hold is the model's: the restart's output checks it; here every
        # block file is a valid one and every row names one, and the database is intact.
        violations, blocks, rows = surviving_state(
            mount / "ssd", mount / "home" / "omlx.sqlite3", _fingerprint_dir(mount / "ssd"), kv_for=None
        )
        assert violations == [], violations
        assert blocks, "no block survived: the cut came too early to test a restart"

        check = _engine(model, mount, tmp_path, "check")
        try:
            out, _ = check.communicate(timeout=600)
        finally:
            check.kill()  # a hang must not keep the mount busy
        assert check.returncode == 0, (tmp_path / "check.log").read_text()[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
    cached, plain = result["cached"], result["plain"]
    assert [c["tokens"] for c in cached] == [p["tokens"] for p in plain]
    assert sum(c["cold"] for c in cached) > 0, cached  # the restart used what survived
