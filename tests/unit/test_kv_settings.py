"""The KV format as settings: server-wide (the pool's engine settings) and per model (its
``ModelSettings`` row, taken at the next load); the memory estimate follows it; bad values are
refused before anything is saved."""

import shutil

import pytest

from inference.engine.kv_quant import KVQuant
from inference.pool import ModelPool

pytestmark = pytest.mark.django_db(transaction=True)
SETTINGS = {"hot_cache_max_size": "1MB", "paged_ssd_cache_dir": None, "max_kv_tokens": 4096}


def test_kv_format_server_wide_and_per_model(tmp_path, model_dir):
    models = tmp_path / "models"
    # Head dim 64 (the tiny preset's 16 is below any quantization group).
    wide = model_dir(
        arch="qwen2", preset="tiny", hidden_size=128, num_attention_heads=2, num_key_value_heads=1
    )
    shutil.copytree(wide, models / "m")
    float_kv = ModelPool([models], SETTINGS).estimate("m").kv_bytes
    pool = ModelPool([models], {**SETTINGS, "kv_bits": 8})
    try:
        # float32 KV: 256 bytes per head and token; 8 bits in groups of 64: 64 + 2 x 4.
        assert pool.estimate("m").kv_bytes * 256 == float_kv * 72
        assert pool.engine("m").loaded.kv_quant == KVQuant(8, 64)
        pool.update_settings("m", {"kv_bits": 4, "kv_group_size": 32})
        assert pool.estimate("m").kv_bytes * 256 == float_kv * 48  # 32 + 4 x 4
        assert pool.engine("m").loaded.kv_quant == KVQuant(8, 64)  # loaded: kept until unloaded
        pool.unload("m")
        engine = pool.engine("m")
        assert engine.loaded.kv_quant == KVQuant(4, 32)
        assert engine.loaded.kv_bytes_per_token == 48 * 2 * 2  # 1 head, K and V, 2 layers
        pool.update_settings("m", {"kv_bits": 0})  # float KV whatever the server's
        assert pool.estimate("m").kv_bytes == float_kv
        pool.unload("m")
        assert pool.engine("m").loaded.kv_quant is None
        for bad in ({"kv_bits": 3}, {"kv_group_size": 48}, {"kv_bits": "8"}, {"kv_group_size": True}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                pool.update_settings("m", bad)
        assert pool.settings("m")["kv_bits"] == 0
    finally:
        pool.close()
