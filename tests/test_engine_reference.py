"""Greedy output of the engine equals HF transformers (PyTorch, float32) token for token,
for each supported architecture, a batch of prompts of different lengths, and with chunked
prefill or preemption forced."""
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from inference.engine import LLM, SamplingParams

ARCHS = ["llama", "mistral", "qwen2", "qwen3"]
PROMPT_LENGTHS = [1, 6, 19, 43]
NEW_TOKENS = 16

MODES = {
    "default": {},
    # Budget of 4 tokens a step: 3-token chunks, prefills interleaved with running decodes.
    "chunked": dict(step_token_budget=4, prefill_chunk_size=3, max_concurrent_requests=4),
    # Room for about two requests: the newest ones are preempted and recomputed.
    "preempt": dict(max_kv_tokens=120, max_concurrent_requests=4),
}


def _prompts(vocab_size):
    rng = np.random.default_rng(1234)
    return [rng.integers(10, vocab_size, size=n).tolist() for n in PROMPT_LENGTHS]


def _hf_greedy(path, prompts, n):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model(ids, use_cache=True)
            generated = []
            for _ in range(n):
                token = int(out.logits[0, -1].argmax())
                generated.append(token)
                out = model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
            outputs.append(generated)
    return outputs


@pytest.fixture(scope="module")
def reference(model_dir):
    cache = {}

    def get(arch):
        if arch not in cache:
            path = model_dir(arch=arch, preset="tiny")
            tokenizer_vocab = len(__import__("json").load(open(path / "tokenizer.json"))["model"]["vocab"])
            prompts = _prompts(tokenizer_vocab)
            cache[arch] = (path, prompts, _hf_greedy(path, prompts, NEW_TOKENS))
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
