"""Greedy output of the engine equals HF transformers (PyTorch, float32) token for token,
for each supported architecture, a batch of prompts of different lengths, and with chunked
prefill or preemption forced."""

import json

import numpy as np
import pytest

from inference.engine import LLM, SamplingParams
from tests.support.hf_reference import hf_greedy

ARCHS = ["llama", "mistral", "qwen2", "qwen3"]
PROMPT_LENGTHS = [1, 6, 19, 43]
NEW_TOKENS = 16

MODES = {
    "default": {},
    # Budget of 4 tokens a step: 3-token chunks, prefills interleaved with running decodes.
    "chunked": dict(step_token_budget=4, prefill_chunk_size=3, max_concurrent_requests=4),
    # Room for about two requests: the newest ones are preempted and recomputed.
    "preempt": dict(max_kv_tokens=100, max_concurrent_requests=4),
}


def _prompts(vocab_size):
    rng = np.random.default_rng(1234)
    return [rng.integers(10, vocab_size, size=n).tolist() for n in PROMPT_LENGTHS]


@pytest.fixture(scope="module")
def reference(model_dir):
    cache = {}

    def get(arch):
        if arch not in cache:
            path = model_dir(arch=arch, preset="tiny")
            tokenizer_vocab = len(json.loads((path / "tokenizer.json").read_text())["model"]["vocab"])
            prompts = _prompts(tokenizer_vocab)
            cache[arch] = (path, prompts, hf_greedy(path, prompts, NEW_TOKENS))
        return cache[arch]

    return get


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_matches_transformers(reference, arch, mode):
    path, prompts, expected = reference(arch)
    with LLM(path, **MODES[mode]) as llm:
        results = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))
        engine = llm.engine
        assert [r.token_ids for r in results] == expected
        assert all(r.finish_reason == "length" for r in results)
        if mode == "chunked":
            assert engine.prefill_chunks >= sum((n - 1 + 2) // 3 for n in PROMPT_LENGTHS)
        if mode == "preempt":
            assert engine.scheduler.num_preemptions > 0
