"""LoRA adapter folders in a model directory (inference.pool.adapters): discovered as their own
ids over their base (found by path or by name), listed with the reason when they cannot be
served, and served by the base's one engine, whose memory estimate counts them."""

import json
import shutil

import pytest

from inference.engine import SamplingParams
from inference.pool import ModelPool, ModelUnavailable
from inference.testkit.adapters import build_adapter

pytestmark = pytest.mark.django_db(transaction=True)

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def models(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapter-models")
    base = root / "tiny-base"
    shutil.copytree(model_dir("qwen2", "tiny"), base)
    build_adapter(root / "by-path", base, seed=1)  # mlx_lm.lora's config: the base's path
    peft = build_adapter(root / "org" / "by-name", base, seed=2, fmt="peft")
    _edit(peft, base_model_name_or_path="SomeOrg/tiny-base")  # as from the Hub: found by name
    missing = build_adapter(root / "orphan", base, seed=3)
    _edit(missing, model="SomeOrg/not-here")
    dora = build_adapter(root / "dora", base, seed=4)
    _edit(dora, fine_tune_type="dora")
    return root


def _edit(path, **changes):
    config = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps(dict(config, **changes)))


def test_adapters_are_discovered_over_their_base(models):
    pool = ModelPool([models], {"max_concurrent_requests": 4})
    folders = pool.folders()
    assert folders["by-path"].base == "tiny-base" and folders["by-path"].servable
    assert folders["org/by-name"].base == "tiny-base" and folders["org/by-name"].servable
    assert folders["by-path"].kind == "llm"
    assert "'SomeOrg/not-here' is not among the served models" in folders["orphan"].reason
    assert "fine_tune_type 'dora'" in folders["dora"].reason
    assert {"tiny-base", "by-path", "org/by-name"} <= set(pool.ids())
    assert "orphan" not in pool.ids()
    with pytest.raises(ModelUnavailable, match="not among the served models"):
        pool.engine("orphan")


def test_the_base_is_loaded_once_and_serves_its_adapters(models):
    pool = ModelPool([models], {"max_concurrent_requests": 4, "dtype": "float32"})
    try:
        with pool.lease("by-path") as first, pool.lease("org/by-name") as second:
            base = pool.loaded("tiny-base")
            assert base is not None and first._engine is base and second._engine is base
            assert list(pool.loaded_models()) == ["tiny-base"]
            outputs = [
                [t for e in engine.submit([5, 6, 7, 8], GREEDY) for t in e.token_ids]
                for engine in (first, second, base)
            ]
        assert len({tuple(o) for o in outputs}) == 3, "each adapter (and the base) answers its own way"
        rows = {row["id"]: row for row in pool.status()["data"]}
        assert rows["by-path"]["loaded"] and rows["by-path"]["base"] == "tiny-base"
        assert pool.states()["org/by-name"] == "loaded"
        adapters = pool.estimate("by-path").weights_bytes + pool.estimate("org/by-name").weights_bytes
        loaded = pool.loaded_models()["tiny-base"]["memory_bytes"]
        assert loaded == pool.estimate("tiny-base").total_bytes + adapters
    finally:
        pool.close()


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"use_dora": True}, "DoRA"),
        ({"rank_pattern": {"q_proj": 8}}, "per-module ranks"),
        ({"alpha_pattern": {"q_proj": 8}}, "per-module alphas"),
        ({"modules_to_save": ["lm_head"]}, "extra saved modules"),
        ({"fan_in_fan_out": True}, "fan_in_fan_out"),
        ({"bias": "all"}, "trains biases"),
        ({"peft_type": "IA3"}, "LORA adapters only"),
        ({"r": 0}, "positive 'r'"),
    ],
)
def test_a_peft_adapter_whose_math_omlx_does_not_compute_is_refused(models, tmp_path, change, reason):
    from inference.engine.adapter_config import AdapterError, read_adapter_config

    folder = tmp_path / "peft"
    shutil.copytree(models / "org" / "by-name", folder)
    read_adapter_config(folder)  # as built: served
    _edit(folder, **change)
    with pytest.raises(AdapterError, match=reason):
        read_adapter_config(folder)
