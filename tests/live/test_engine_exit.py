"""Engines close themselves at exit: a script that never calls close() exits cleanly.

Without it, an engine thread still inside MLX while the interpreter tears down aborts the process
("terminate called without an active exception", exit code 134) in some runs, so the script runs
several times (two at a time) and every exit must be clean: RUNS times in the default run (the
"several" case aborted in 10 of 10 runs before engines closed themselves), SLOW_RUNS times in the
slow run, for the rarer aborts.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = 4
SLOW_RUNS = 20

# argv: text model folder, encoder model folder, case. Nothing here closes an engine.
SCRIPT = r"""
import sys

import inference  # noqa: F401  (loads the fast CPU BLAS before mlx)
from inference.engine import LLM, Engine, SamplingParams

text, encoder, case = sys.argv[1:4]
llm = LLM(text)
print(llm.generate("hello there", SamplingParams(max_tokens=4, temperature=0))[0].finish_reason)
if case == "several":
    from inference.embedding.engine import EncoderEngine

    other = LLM(text)
    other.generate("general kenobi", SamplingParams(max_tokens=2))
    busy = Engine(text)
    busy.submit("a request still running at exit", SamplingParams(max_tokens=100000, ignore_eos=True))
    embedder = EncoderEngine(encoder, "embedding", dtype="float32")
    embedder.submit(embedder.loaded.tokenize(["one", "two"]))
    # Collection closes an LLM's engine too.
    del other
"""


@pytest.fixture(scope="module")
def folders(model_dir):
    return str(model_dir("qwen2")), str(model_dir("bert_embedding"))


def _run(args):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMLX_LOG_LEVEL="ERROR")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout + proc.stderr


def _clean_exits(folders, runs):
    # "several" starts with the one-LLM script and adds the harder cases.
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_run, [(*folders, "several")] * runs))
    bad = [(code, out[-2000:]) for code, out in results if code != 0 or "terminate called" in out]
    assert bad == [], f"{len(bad)} of {runs} runs did not exit cleanly; the first: {bad[0]}"


def test_a_script_that_never_closes_its_engines_exits_cleanly(folders):
    _clean_exits(folders, RUNS)


@pytest.mark.slow
def test_a_script_that_never_closes_its_engines_exits_cleanly_every_time(folders):
    _clean_exits(folders, SLOW_RUNS)
