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
