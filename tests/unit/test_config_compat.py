"""config_compat: transformers 5's config keys become what mlx-lm reads, and a key that changes the
math without a mapping is refused, by the loader (ModelLoadError) and by discovery (the reason)."""

import json
import math
import shutil

import pytest

from inference.engine import ModelLoadError, load_model
from inference.engine.config_compat import ConfigError, for_mlx_lm
from inference.pool.discovery import inspect


def _rope(theta, **scaling):
    return {"rope_type": "default", "rope_theta": theta, **scaling}


def _llama(**fields):
    return {"model_type": "llama", "num_hidden_layers": 2, **fields}


def test_one_dict_maps_theta_and_scaling_and_leaves_the_input_alone():
    llama3 = dict(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    )
    config = _llama(rope_parameters=_rope(500000.0, **dict(llama3, rope_type="llama3")))
    before = json.dumps(config, sort_keys=True)
    mapped = for_mlx_lm(config)
    assert json.dumps(config, sort_keys=True) == before
    assert mapped["rope_theta"] == 500000.0
    assert mapped["rope_scaling"] == dict(llama3, rope_type="llama3")
    assert "rope_scaling" not in for_mlx_lm(_llama(rope_parameters=_rope(10.0)))


def test_per_layer_type_rope_and_layer_pattern_of_gemma3():
    config = {
        "model_type": "gemma3_text",
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2,
        "_sliding_window_pattern": 6,
        "rope_parameters": {
            "full_attention": _rope(1e6, rope_type="linear", factor=8.0),
            "sliding_attention": _rope(1e4),
        },
    }
    mapped = for_mlx_lm(config)
    assert mapped["rope_theta"] == 1e6 and mapped["rope_local_base_freq"] == 1e4
    assert mapped["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}
    assert mapped["sliding_window_pattern"] == 6


def test_other_moved_keys():
    qwen3_5 = for_mlx_lm(
        {
            "model_type": "qwen3_5_text",
            "tie_word_embeddings": True,
            "layer_types": ["linear_attention", "full_attention"] * 2,
            "rope_parameters": _rope(1e7, partial_rotary_factor=0.25),
        }
    )
    assert qwen3_5["model_type"] == "qwen3_5" and qwen3_5["tie_word_embeddings"] is True
    assert qwen3_5["text_config"]["full_attention_interval"] == 2
    assert qwen3_5["text_config"]["partial_rotary_factor"] == 0.25
    moe = for_mlx_lm({"model_type": "qwen3_moe", "num_local_experts": 8, "rope_parameters": _rope(1.0)})
    assert moe["num_experts"] == 8
    nemotron = for_mlx_lm({"model_type": "nemotron_h", "time_step_limit": [0.0, {"__float__": "Infinity"}]})
    assert nemotron["time_step_limit"] == [0.0, math.inf]


@pytest.mark.parametrize(
    "config, key",
    [
        (_llama(rope_parameters=_rope(1e4, rope_type="su_perfect", factor=2.0)), "rope_type 'su_perfect'"),
        (
            _llama(rope_parameters=_rope(1e4, rope_type="yarn", factor=2.0, attention_factor=0.5)),
            "attention_factor",
        ),
        (_llama(rope_parameters=_rope(1e4, partial_rotary_factor=0.5)), "partial_rotary_factor"),
        (_llama(rope_theta=1e4, rope_parameters=_rope(5e5)), "rope_theta"),
        (
            _llama(rope_parameters={"full_attention": _rope(1e6), "sliding_attention": _rope(1e4)}),
            "sliding_attention",
        ),
        (
            {"model_type": "gemma2", "rope_parameters": _rope(1e4, rope_type="linear", factor=2.0)},
            "rope_type",
        ),
        (
            {"model_type": "gemma3_text", "layer_types": ["full_attention", "sliding_attention"]},
            "layer_types",
        ),
    ],
)
def test_unmapped_math_is_refused_naming_the_key(config, key):
    with pytest.raises(ConfigError) as info:
        for_mlx_lm(config)
    assert key in str(info.value)


def test_loader_and_discovery_refuse_with_the_message(tmp_path, model_dir):
    path = tmp_path / "llama-t5"
    shutil.copytree(model_dir("llama", "tiny"), path)
    config = json.loads((path / "config.json").read_text())
    del config["rope_theta"], config["rope_scaling"]
    config["rope_parameters"] = _rope(5e5, rope_type="su_perfect")
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="rope_type 'su_perfect' is not supported"):
        load_model(path)
    assert "rope_type 'su_perfect' is not supported" in inspect("llama-t5", path).reason


def test_old_style_rope_scaling_keys_mlx_lm_ignores_are_named_in_a_warning(caplog):
    """transformers 4's rope_scaling is read as it is (refusing would refuse folders that load
    today); what its RoPE does not read, or a model that reads no scaling, is named."""
    linear = {"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0}
    with caplog.at_level("WARNING", logger="omlx.engine"):
        assert for_mlx_lm(_llama(rope_theta=10.0, rope_scaling=linear))["rope_scaling"] == linear
        for_mlx_lm({"model_type": "gemma2", "rope_scaling": {"type": "linear", "factor": 4.0}})
        for_mlx_lm(_llama(rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}))
        for_mlx_lm(_llama(rope_scaling={"rope_type": "yarn", "factor": 4.0, "truncate": True}))
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:2] == [
        "config.json: rope_scaling low_freq_factor ignored by mlx-lm's linear RoPE",
        "config.json: rope_scaling (linear) is ignored by this model_type in mlx-lm",
    ]
    assert len(messages) == 2  # mrope's sections and yarn's truncate are read
