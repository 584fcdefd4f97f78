"""GGUF files of tiny testkit models (llama, qwen2, qwen3, gemma3), written as llama.cpp writes
them (inference.testkit.gguf_file), imported by ``inference.gguf`` and compared with
transformers' GGUF loader on the same file: the same logits (float32, within 1e-4 + 1e-5
relative, of a spread of tens of units) and the same greedy next tokens; the tokenizer from
the metadata encodes as the original tokenizer.json. Plus: Q8_0 stays MLX-quantized,
``--quantize`` requantizes float tensors, and an architecture omlx does not import is refused
by name.
"""

import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

from inference.engine.model_loader import load_model
from inference.gguf.importer import GgufImportError, import_gguf
from inference.testkit.gguf_file import write_gguf
from inference.testkit.registry import build_model

TEXTS = ["The people of the world find water.", "Why? 2048 words, three days: no!"]
# gemma3: six layers so that transformers' default pattern (every 6th layer global) and its
# default query scale (256) are the model's; llama.cpp's GGUF keys carry neither.
FAMILIES = {
    "llama": {},
    "qwen2": {},
    "qwen3": {},
    "gemma3_text": {"head_dim": 256, "sliding_window_pattern": 6, "num_hidden_layers": 6},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {arch: build_model(root / arch, arch=arch, **overrides) for arch, overrides in FAMILIES.items()}


def _import(folder, tmp_path, tensor_type="F32", quantize=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = write_gguf(folder, tmp_path / f"{folder.name}.gguf", tensor_type)
    summaries = []
    dest = import_gguf(source, tmp_path / "models" / folder.name, quantize, on_summary=summaries.append)
    return source, dest, summaries[0]


def _mlx_logits(folder, ids):
    loaded = load_model(folder, dtype="float32")
    return np.array(loaded.model(mx.array([ids]))[0].astype(mx.float32))


def _transformers_logits(source, ids, **overrides):
    # transformers' qwen3 GGUF mapping skips attention.key_length (real Qwen3s have its default,
    # 128); the tiny models' head size is given as an override
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32, **overrides
    )
    with torch.no_grad():
        return model.eval()(torch.tensor([ids])).logits[0].numpy()


def _head_dim(folder):
    return json.loads((folder / "config.json").read_text())["head_dim"]


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_imported_family_equals_transformers_gguf_loader(arch, folders, tmp_path):
    source, dest, _ = _import(folders[arch], tmp_path)
    original = Tokenizer.from_file(str(folders[arch] / "tokenizer.json"))
    imported = Tokenizer.from_file(str(dest / "tokenizer.json"))
    ids = [original.encode(t).ids for t in TEXTS]
    assert [imported.encode(t).ids for t in TEXTS] == ids
    prompt = ids[0] + ids[1]
    overrides = {"head_dim": _head_dim(dest)} if arch == "qwen3" else {}
    ours, theirs = _mlx_logits(dest, prompt), _transformers_logits(source, prompt, **overrides)
    assert np.abs(theirs).max() > 5  # a spread worth comparing
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-5)
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
    settings = json.loads((dest / "tokenizer_config.json").read_text())
    assert (
        settings["chat_template"]
        == json.loads((folders[arch] / "tokenizer_config.json").read_text())["chat_template"]
    )
    assert settings["eos_token"] == "<|im_end|>"


def test_q8_0_is_kept_quantized_and_float_is_requantized(folders, tmp_path):
    source, dest, summary = _import(folders["qwen3"], tmp_path, tensor_type="Q8_0", quantize=4)
    config = json.loads((dest / "config.json").read_text())
    assert summary.lines[1:] == ["16 Q8_0 tensors kept as MLX quantized weights (group size 32, exact)"]
    assert config["quantization"]["bits"] == 8 and config["quantization"]["group_size"] == 32
    # Q8_0 blocks dequantize (in float32) to what transformers' loader computes from them
    prompt = Tokenizer.from_file(str(dest / "tokenizer.json")).encode(TEXTS[0]).ids
    np.testing.assert_allclose(
        _mlx_logits(dest, prompt),
        _transformers_logits(source, prompt, head_dim=_head_dim(dest)),
        atol=1e-4,
        rtol=1e-5,
    )
    # a float file with --quantize 4: MLX's own 4-bit format, group size 64
    _, dest4, summary4 = _import(folders["qwen2"], tmp_path / "q4", quantize=4)
    config4 = json.loads((dest4 / "config.json").read_text())
    assert config4["quantization"] == {"group_size": 64, "bits": 4} == config4["quantization_config"]
    assert summary4.lines[-1] == "16 float tensors requantized by MLX (4 bits)"
    assert load_model(dest4, dtype="float32").model is not None


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_q4_blocks_are_kept_quantized_and_exact(kind, folders, tmp_path):
    source, dest, summary = _import(folders["llama"], tmp_path, tensor_type=kind)
    assert summary.lines[1:] == [f"16 {kind} tensors kept as MLX quantized weights (group size 32, exact)"]
    prompt = Tokenizer.from_file(str(dest / "tokenizer.json")).encode(TEXTS[0]).ids
    np.testing.assert_allclose(
        _mlx_logits(dest, prompt), _transformers_logits(source, prompt), atol=1e-4, rtol=1e-5
    )


def test_a_file_mlx_cannot_open_is_read_by_gguf_py_and_dequantized(folders, tmp_path):
    source, dest, summary = _import(folders["qwen2"], tmp_path, tensor_type="Q5_0")
    assert summary.lines[1:] == ["16 Q5_0 tensors dequantized to float"]
    prompt = Tokenizer.from_file(str(dest / "tokenizer.json")).encode(TEXTS[0]).ids
    np.testing.assert_allclose(
        _mlx_logits(dest, prompt), _transformers_logits(source, prompt), atol=1e-4, rtol=1e-5
    )


def test_llama3_rope_freqs_become_its_rope_scaling(tmp_path):
    """llama 3.x GGUFs carry their RoPE scaling only as per-frequency factors (rope_freqs), which
    transformers' GGUF loader ignores: compared with transformers on the original folder."""
    scaling = dict(
        rope_type="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    folder = build_model(tmp_path / "llama3", arch="llama", rope_scaling=scaling)
    _, dest, _ = _import(folder, tmp_path)
    assert json.loads((dest / "config.json").read_text())["rope_scaling"] == scaling
    prompt = Tokenizer.from_file(str(dest / "tokenizer.json")).encode(TEXTS[0] + TEXTS[1]).ids
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(torch.tensor([prompt])).logits[0].numpy()
    np.testing.assert_allclose(_mlx_logits(dest, prompt), theirs, atol=1e-4, rtol=1e-5)


def test_unsupported_architecture_is_refused_by_name(folders, tmp_path):
    source = write_gguf(folders["qwen2"], tmp_path / "phi.gguf", architecture="phi3")
    with pytest.raises(
        GgufImportError, match="GGUF architecture 'phi3' is not supported; omlx imports llama"
    ):
        import_gguf(source, tmp_path / "models" / "phi")
    assert not (tmp_path / "models" / "phi").exists()
