"""The families built with transformers' classes (inference.testkit.hf): each folder loads
in transformers and mlx-lm, both compute the same logits with a wide top-1 margin, the folder
has the layout of the family's checkpoints, and building them without torch fails clearly."""

import io
import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch
from django.core.management import call_command
from mlx_lm.utils import load

from inference.testkit.registry import TRANSFORMERS_BUILT, build_model
from inference.testkit.hf import load_transformers
from tests.support.hf_reference import hf_next
from tests.reference.test_engine_reference_families import STEPWISE

ROOT = Path(__file__).resolve().parents[2]
TEXT = (
    "The server keeps every prompt prefix it has computed, so the next request with the same "
    "prefix starts where the last one stopped. Blocks of tokens move between memory and disk.\n"
)


def _safetensors_names(path):
    names = set()
    for file in path.glob("model*.safetensors"):
        with file.open("rb") as f:
            names |= set(json.loads(f.read(int.from_bytes(f.read(8), "little")))) - {"__metadata__"}
    return names


def _hf_logits(model, ids, stepwise):
    with torch.no_grad():
        if not stepwise:
            return model(torch.tensor([ids])).logits[0].numpy()
        out = model(torch.tensor([ids[:1]]), use_cache=True)
        logits = [out.logits[0, -1].numpy()]
        for token in ids[1:]:
            out = hf_next(model, out, token)
            logits.append(out.logits[0, -1].numpy())
        return np.array(logits)


@pytest.mark.parametrize(
    "arch,overrides",
    [
        *[(arch, {}) for arch in TRANSFORMERS_BUILT],
        ("gemma3_text", dict(tie_word_embeddings=True)),
    ],
)
def test_logits_agree_and_top1_margin_is_wide(model_dir, arch, overrides):
    path = model_dir(arch=arch, **overrides)
    mlx_model, tokenizer = load(path)
    ids = tokenizer.encode(TEXT * 2)  # about 110 tokens: past the 16-token sliding window
    hf = _hf_logits(load_transformers(path), ids, stepwise=arch in STEPWISE)
    ml = np.array(mlx_model(mx.array([ids]))[0])
    # Mamba2 layers compound float32 rounding (exp of cumulative decays) more than attention.
    np.testing.assert_allclose(ml, hf, atol=5e-2 if arch == "nemotron_h" else 2e-3, rtol=1e-4)
    top2 = np.sort(hf, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.1
    assert (ml.argmax(-1) == hf.argmax(-1))[clear].all()
    assert np.mean((top2[:, 1] - top2[:, 0]) / np.abs(top2[:, 1]) < 1e-3) < 0.05
    assert len(set(hf.argmax(-1))) > len(ids) // 10
    text = tokenizer.decode(hf.argmax(-1).tolist())
    assert text.isascii() and "\ufffd" not in text


def test_folders_have_the_layout_of_the_family_checkpoints(model_dir):
    qwen35 = json.loads((model_dir(arch="qwen3_5") / "config.json").read_text())
    assert qwen35["model_type"] == "qwen3_5" and qwen35["text_config"]["model_type"] == "qwen3_5_text"
    assert qwen35["text_config"]["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    names = _safetensors_names(model_dir(arch="qwen3_5"))
    assert all(n.startswith(("model.language_model.", "lm_head.")) for n in names)

    gemma = json.loads((model_dir(arch="gemma3_text") / "config.json").read_text())
    assert gemma["sliding_window"] == 16 and gemma["sliding_window_pattern"] == 2
    assert gemma["layer_types"] == ["sliding_attention", "full_attention"] * 2

    gpt_oss = _safetensors_names(model_dir(arch="gpt_oss"))
    assert (
        "model.layers.0.mlp.experts.gate_proj.weight" in gpt_oss
        and "model.layers.0.self_attn.sinks" in gpt_oss
    )

    moe = json.loads((model_dir(arch="qwen3_moe") / "config.json").read_text())
    assert moe["num_experts"] == 4 and "model.layers.1.mlp.experts.3.down_proj.weight" in _safetensors_names(
        model_dir(arch="qwen3_moe")
    )

    nemotron = json.loads((model_dir(arch="nemotron_h") / "config.json").read_text())
    assert nemotron["layers_block_type"] == ["linear_attention", "mlp", "full_attention", "mlp"] + [
        "linear_attention",
        "mlp",
    ]
    for arch in TRANSFORMERS_BUILT:
        config = json.loads((model_dir(arch=arch) / "config.json").read_text())
        assert config["eos_token_id"] == 2 and config["torch_dtype"] == "float32"


def test_same_arguments_write_the_same_bytes(tmp_path, model_dir):
    first, second = model_dir(arch="qwen3_moe"), build_model(tmp_path / "again", arch="qwen3_moe")
    for file in first.iterdir():
        assert (second / file.name).read_bytes() == file.read_bytes(), file.name
    other = build_model(tmp_path / "seed1", arch="qwen3_moe", seed=1)
    assert (other / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(arch="gpt_oss", preset="small"),
        dict(arch="qwen3_moe", no_such_field=1),
        dict(arch="gemma3_text", layer_types=["full_attention"] * 4),
        dict(arch="qwen3_5", vocab_size=100),
    ],
)
def test_bad_arguments_raise_value_error(tmp_path, kwargs):
    with pytest.raises(ValueError):
        build_model(tmp_path, **kwargs)


def test_without_torch_the_new_families_say_what_to_install(tmp_path, model_dir):
    script = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from inference.testkit.registry import build_model\n"
        f"build_model({str(tmp_path / 'qwen2')!r}, arch='qwen2')\n"
        "try:\n"
        f"    build_model({str(tmp_path / 'q35')!r}, arch='qwen3_5')\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "pip install 'omlx[test]'" in out.stdout
    for file in model_dir(arch="qwen2").iterdir():  # the hand-written families need no torch
        assert (tmp_path / "qwen2" / file.name).read_bytes() == file.read_bytes()


def test_management_command_writes_a_quantized_folder(tmp_path):
    out = io.StringIO()
    call_command(
        "build_test_model",
        str(tmp_path / "q"),
        "--arch",
        "qwen3_moe",
        "--quantize",
        "4",
        "--group-size",
        "32",
        stdout=out,
    )
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["quantization"]["bits"] == 4 and config["quantization"]["group_size"] == 32
    assert "4-bit" in out.getvalue()
    model, _ = load(tmp_path / "q")
    assert model(mx.array([[5, 6, 7]])).shape == (1, 3, 1024)


def test_omlx_build_model_accepts_the_new_families(tmp_path):
    def omlx(*args):
        return subprocess.run(
            [sys.executable, "-m", "omlx_site.cli", "build-model", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert "gemma3_text" in omlx("--help").stdout
    out = omlx(str(tmp_path / "g"), "--arch", "gpt_oss", "--quantize", "8", "--group-size", "32")
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "g" / "config.json").read_text())["quantization"]["bits"] == 8
    bad = omlx(str(tmp_path / "b"), "--arch", "nemotron_h", "--preset", "small")
    assert bad.returncode == 2 and "unknown preset 'small' for nemotron_h" in bad.stderr
