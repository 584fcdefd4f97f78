"""Folders exactly as transformers 5 writes them (``inference.testkit.native``: ``save_pretrained``,
nothing repaired) are served with transformers' math: the engine's greedy tokens equal
transformers' for every text family of the factory, and for the RoPE scalings mlx-lm implements.

Each folder's RoPE base is unusual (not any ModelArgs default), so a config key that the loader
failed to map would change the tokens rather than fall back on a lucky default."""

import numpy as np
import pytest

from inference.engine import LLM, SamplingParams
from inference.testkit.native import ARCHITECTURES, build_native
from tests.support.hf_reference import hf_greedy

PROMPT_LENGTHS = [3, 21]  # the second is longer than the 16-token sliding windows
NEW_TOKENS = 8


def _rope(theta, **scaling):
    return {"rope_type": "default", "rope_theta": theta, **scaling}


# Overrides of each family's tiny preset, in transformers 5's own form.
CASES = {arch: dict(rope_parameters=_rope(2000.0)) for arch in ARCHITECTURES}
CASES["gemma3_text"] = dict(
    rope_parameters={"full_attention": _rope(3000.0), "sliding_attention": _rope(50.0)}
)
CASES["gpt_oss"] = {}  # its preset's YaRN
CASES["qwen3_5"] = dict(rope_parameters=_rope(2000.0, partial_rotary_factor=0.5))
CASES["nemotron_h"] = {}  # no RoPE: its Mamba layers order the tokens
SCALED = {
    "llama-llama3": (
        "llama",
        dict(
            rope_parameters=_rope(
                2000.0,
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            )
        ),
    ),
    "mistral-linear": ("mistral", dict(rope_parameters=_rope(2000.0, rope_type="linear", factor=4.0))),
    "qwen3-yarn": (
        "qwen3",
        dict(
            rope_parameters=_rope(
                2000.0, rope_type="yarn", factor=4.0, original_max_position_embeddings=1024, truncate=True
            )
        ),
    ),
}

# transformers' full-sequence Mamba2 scan differs from its recurrent step (see
# test_engine_reference_families.py): the reference feeds nemotron_h's prompt token by token.
STEPWISE = {"nemotron_h"}


@pytest.mark.parametrize("case", list(ARCHITECTURES) + list(SCALED))
def test_native_folder_greedy_matches_transformers(tmp_path, case):
    arch, overrides = SCALED.get(case, (case, CASES.get(case, {})))
    path = build_native(tmp_path / case, arch, **overrides)
    rng = np.random.default_rng(7)
    prompts = [rng.integers(10, 900, size=n).tolist() for n in PROMPT_LENGTHS]
    expected = hf_greedy(path, prompts, NEW_TOKENS, stepwise=arch in STEPWISE)
    with LLM(path, prefix_cache=False) as llm:
        results = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))
    assert [r.error for r in results] == [None] * len(prompts)
    assert [r.token_ids for r in results] == expected


# Vision-language folders (read by mlx-vlm): the testkit's Hub-format folder with an unusual RoPE
# base, its config saved again by transformers 5 (text_config, rope_parameters with MRoPE's
# sections or one entry per layer type, layer_types, the tower's own model_type).
VISION_ROPE = {
    "qwen2_vl": {"rope_theta": 2000.0},
    "gemma3": {"rope_theta": 2000.0, "rope_local_base_freq": 50.0},
}


@pytest.mark.parametrize("arch", list(VISION_ROPE))
def test_native_vision_config_answers_as_transformers(tmp_path, arch):
    import json
    import shutil

    import mlx.core as mx
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from inference.engine import load_model
    from inference.pool.discovery import inspect
    from inference.testkit.registry import build_model

    hub = build_model(tmp_path / "hub", arch=arch)
    config = json.loads((hub / "config.json").read_text())
    (config.get("text_config") if arch == "gemma3" else config).update(VISION_ROPE[arch])
    (hub / "config.json").write_text(json.dumps(config))
    native = tmp_path / "native"
    shutil.copytree(hub, native)
    AutoConfig.from_pretrained(hub).save_pretrained(native)
    written = json.loads((native / "config.json").read_text())
    assert "rope_theta" not in written["text_config"] and "rope_parameters" in written["text_config"]
    found = inspect("native", native)
    assert found.servable, found.reason
    ids = [[5, 17, 42, 99, 7, 300, 12, 8]]
    ours = load_model(native, dtype="float32").model(mx.array(ids))[0].astype(mx.float32)
    reference = AutoModelForImageTextToText.from_pretrained(hub, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = reference(torch.tensor(ids)).logits[0].numpy()
    np.testing.assert_allclose(np.array(ours), theirs, atol=1e-4, rtol=1e-5)
