"""The SSD tier across processes: after a restart the same prompt is a cold hit with the
identical output."""

import json
import os
import subprocess
import sys

SCRIPT = """
import inference, json, sys
from inference.engine import LLM, SamplingParams
path, cache_dir, hot = sys.argv[1], sys.argv[2], sys.argv[3]
hot = int(hot) if hot.isdigit() else hot
prompt = list(range(10, 10 + 70))
with LLM(path, cache_block_size=16, paged_ssd_cache_dir=cache_dir, hot_cache_max_size=hot) as llm:
    r = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0]
print(json.dumps({"tokens": r.token_ids, "hot": r.usage.hot_cached_tokens,
                  "cold": r.usage.cold_cached_tokens}))
"""


def _run(path, cache_dir, hot="100MB"):
    env = {**os.environ, "OMLX_HOME": str(cache_dir.parent / "home")}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(cache_dir), str(hot)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_prompt_hits_the_ssd_tier_after_a_restart(model_dir, tmp_path):
    path = model_dir(arch="qwen2", preset="tiny")
    first = _run(path, tmp_path / "ssd")
    assert first["hot"] == 0 and first["cold"] == 0
    second = _run(path, tmp_path / "ssd")
    assert second["tokens"] == first["tokens"]
    assert second["cold"] == 69 and second["hot"] == 0
    # No RAM tier at all: every hit comes from disk, output unchanged.
    third = _run(path, tmp_path / "ssd", hot=0)
    assert third["tokens"] == first["tokens"] and third["cold"] == 69
