"""Built model folders load in transformers and mlx-lm, and both compute the same thing."""

import io
import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from django.core.management import CommandError, call_command
from mlx_lm.generate import generate_step
from mlx_lm.utils import load
from transformers import AutoModelForCausalLM, AutoTokenizer

from inference.testkit import base
from inference.testkit.registry import HAND_WRITTEN, build_model

NEW_TOKENS = 24
TEXT = (
    "The server keeps every prompt prefix it has computed, so the next request with the same "
    "prefix starts where the last one stopped. Blocks of tokens move between memory and disk.\n"
)


def _hf(path):
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    return model.eval()


def _hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def _mlx_logits(model, ids):
    return np.array(model(mx.array([ids]))[0])


@pytest.fixture(scope="module", params=HAND_WRITTEN)
def loaded(request, model_dir):
    path = model_dir(arch=request.param)
    mlx_model, tokenizer = load(path)
    return path, _hf(path), mlx_model, tokenizer


def _prompts(tokenizer):
    chat = [{"role": "user", "content": "Write a story about a river."}]
    return [
        tokenizer.encode(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)),
        tokenizer.encode(TEXT),
        tokenizer.encode(TEXT * 12),
    ]


def test_logits_agree_and_top1_margin_is_wide(loaded):
    _, hf_model, mlx_model, tokenizer = loaded
    ids = tokenizer.encode(TEXT * 6)
    hf, ml = _hf_logits(hf_model, ids), _mlx_logits(mlx_model, ids)
    np.testing.assert_allclose(ml, hf, atol=2e-3, rtol=1e-4)
    top2 = np.sort(hf, axis=-1)[:, -2:]
    relative_gap = (top2[:, 1] - top2[:, 0]) / np.abs(top2[:, 1])
    assert np.mean(relative_gap < 1e-3) < 0.03
    assert len(set(hf.argmax(-1))) > len(ids) // 10


def test_greedy_generation_is_token_identical(loaded):
    _, hf_model, mlx_model, tokenizer = loaded
    eos = set(tokenizer.eos_token_ids)
    for ids in _prompts(tokenizer):
        with torch.no_grad():
            out = hf_model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
            )
        expected = out[0, len(ids) :].tolist()
        got = []
        steps = generate_step(
            mx.array(ids), mlx_model, max_tokens=NEW_TOKENS, sampler=lambda x: mx.argmax(x, -1)
        )
        for token, _ in steps:
            got.append(int(token))
            if got[-1] in eos:
                break
        assert got == expected
        text = tokenizer.decode(got)
        assert text.isascii() and "\ufffd" not in text


def test_tokenizer_round_trips_text_in_transformers_and_mlx_lm(model_dir):
    path = model_dir()
    text = "Hello, wörld! 12345 über\n\ttabs and emoji 😀, then <|im_end|> in text."
    hf = AutoTokenizer.from_pretrained(path)
    _, wrapper = load(path)
    ids = hf.encode(text)
    assert len(hf) == 1024 and hf.eos_token == "<|im_end|>" and hf.pad_token == "<|endoftext|>"
    assert hf.decode(ids) == text and wrapper.decode(ids) == text
    assert wrapper.encode(text) == ids
    assert ids.count(hf.convert_tokens_to_ids("<|im_end|>")) == 1
    assert len(hf.encode(TEXT)) < len(TEXT) // 3
    detokenizer = wrapper.detokenizer
    detokenizer.reset()
    for token in ids:
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert detokenizer.text == text
    assert wrapper.eos_token_ids == {hf.eos_token_id}


def test_chat_template_is_chatml(model_dir):
    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    system = {"role": "system", "content": "Be brief."}
    user = {"role": "user", "content": "Hi"}
    assistant = {"role": "assistant", "content": "Hello."}
    assert tokenizer.apply_chat_template([system, user], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.apply_chat_template([user, assistant], tokenize=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    )


def test_config_matches_the_architecture(model_dir):
    config = json.loads((model_dir(arch="qwen3") / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["head_dim"] == 16 and config["torch_dtype"] == "float32"
    generation = json.loads((model_dir(arch="qwen3") / "generation_config.json").read_text())
    assert generation["eos_token_id"] == config["eos_token_id"] == 2


def test_tied_sharded_model_with_larger_vocab_loads_in_both(tmp_path, monkeypatch):
    monkeypatch.setattr(base, "MAX_SHARD_BYTES", 200_000)
    path = build_model(tmp_path, arch="qwen2", tie_word_embeddings=True, vocab_size=1500)
    assert len(list(tmp_path.glob("model-0000*-of-*.safetensors"))) > 1
    assert (path / "model.safetensors.index.json").exists() and not (path / "model.safetensors").exists()
    mlx_model, tokenizer = load(path)
    ids = tokenizer.encode(TEXT)
    hf = _hf_logits(_hf(path), ids)
    np.testing.assert_allclose(_mlx_logits(mlx_model, ids), hf, atol=2e-3, rtol=1e-4)
    assert hf.shape[-1] == 1500 and hf.argmax(-1).max() < 1024


def test_bfloat16_weights_are_the_rounded_float32_weights(tmp_path, model_dir):
    full = _hf(model_dir(arch="llama")).state_dict()
    path = build_model(tmp_path, arch="llama", dtype="bfloat16")
    half = AutoModelForCausalLM.from_pretrained(path).state_dict()
    assert all(half[k].dtype == torch.bfloat16 and torch.equal(full[k].bfloat16(), half[k]) for k in full)


def test_same_arguments_write_the_same_bytes(tmp_path, model_dir):
    first, second = model_dir(arch="mistral"), build_model(tmp_path / "again", arch="mistral")
    for file in first.iterdir():
        assert (second / file.name).read_bytes() == file.read_bytes(), file.name
    other = build_model(tmp_path / "seed1", arch="mistral", seed=1)
    assert (other / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(arch="gpt2"),
        dict(preset="huge"),
        dict(dtype="int8"),
        dict(rope_thetaa=1.0),
        dict(arch="qwen2", head_dim=32),
        dict(num_key_value_heads=3),
        dict(vocab_size=100),
    ],
)
def test_bad_arguments_raise_value_error(tmp_path, kwargs):
    with pytest.raises(ValueError):
        build_model(tmp_path, **kwargs)


def test_management_command_builds_and_reports(tmp_path):
    out = io.StringIO()
    call_command(
        "build_test_model", str(tmp_path / "m"), "--arch", "llama", "--set", "num_hidden_layers=3", stdout=out
    )
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 3
    assert str(tmp_path / "m") in out.getvalue() and "M parameters" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("build_test_model", str(tmp_path / "bad"), "--set", "no_such_field=1", stdout=out)
