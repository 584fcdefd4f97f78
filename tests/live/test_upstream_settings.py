"""An upstream oMLX ~/.omlx/settings.json (nested sections) is converted on the first start: what
has an equivalent in omlx's table is carried over, the rest is named in a warning, the original is
kept beside it. Checked with a real `omlx serve` and in-process."""

import json
import stat

import httpx

from omlx_site import config, upstream_settings
from tests.support.server import ServerProcess


def upstream_file(models, key="sk-upstream"):
    """A settings.json as upstream oMLX writes it (its sections and keys, values of a user's)."""
    return {
        "version": "1.0",
        "server": {
            "host": "127.0.0.1",
            "port": 8123,
            "log_level": "info",
            "cors_origins": ["*"],
            "server_aliases": [],
        },
        "model": {"model_dirs": [str(models)], "model_dir": str(models), "model_fallback": False},
        "memory": {"prefill_memory_guard": True, "memory_guard_tier": "balanced", "soft_threshold": 0.85},
        "scheduler": {"max_concurrent_requests": 3, "embedding_batch_size": 32, "chunked_prefill": False},
        "cache": {
            "enabled": True,
            "hot_cache_only": False,
            "ssd_cache_dir": None,
            "ssd_cache_max_size": "auto",
            "hot_cache_max_size": "2GB",
            "initial_cache_blocks": 256,
        },
        "auth": {"api_key": key, "secret_key": "s3cret", "skip_api_key_verification": False, "sub_keys": []},
        "huggingface": {"endpoint": "https://hf-mirror.example", "hf_cache_enabled": True},
        "sampling": {
            "max_context_window": 32768,
            "max_tokens": 32768,
            "temperature": 1.0,
            "top_p": 0.95,
            "top_k": 0,
            "repetition_penalty": 1.0,
        },
        "logging": {"log_dir": None, "retention_days": 7},
        "ui": {"language": "en", "dashboard_layout": None},
    }


def test_convert_maps_what_has_an_equivalent(tmp_path):
    data = upstream_file(tmp_path / "m")
    assert upstream_settings.is_upstream(data)
    assert not upstream_settings.is_upstream({"port": 8123, "model_dir": ["/x"]})  # omlx's own
    values, carried, left = upstream_settings.convert(data, config.BY_KEY)
    assert values == {
        "host": "127.0.0.1",
        "port": 8123,
        "model_dir": [str(tmp_path / "m")],
        "max_concurrent_requests": 3,
        "hot_cache_max_size": "2GB",
        "api_key": "sk-upstream",
    }
    assert "server.port -> port" in carried and "auth.api_key -> api_key" in carried
    for name in (
        "memory.*",
        "sampling.*",
        "ui.language",
        "auth.secret_key",
        "huggingface.endpoint",
        "server.log_level",
        "scheduler.chunked_prefill",
        "cache.initial_cache_blocks",
    ):
        assert name in left, (name, left)
    assert not any(
        "ssd_cache_max_size" in n or "hot_cache_max_size" in n for n in left
    )  # "auto": omlx's default
    # No SSD tier upstream, no Hugging Face cache, the older single model_dir, a value omlx refuses.
    data["cache"].update(enabled=False)
    data["huggingface"]["hf_cache_enabled"] = False
    data["model"] = {"model_dir": "/old/models", "model_dirs": []}
    data["scheduler"]["max_concurrent_requests"] = 0
    values, carried, left = upstream_settings.convert(data, config.BY_KEY)
    assert (values["paged_ssd_cache_dir"], values["hf_cache"], values["model_dir"]) == (
        "off",
        "off",
        ["/old/models"],
    )
    assert "max_concurrent_requests" not in values
    assert any(n.startswith("scheduler.max_concurrent_requests (") for n in left)


def test_first_start_converts_upstream_settings(tmp_path, model_dir):
    import shutil

    models = tmp_path / "upstream-models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path / "home"
    home.mkdir()
    original = json.dumps(upstream_file(models), indent=2).encode()
    (home / "settings.json").write_bytes(original)

    server = ServerProcess([], home)  # no --model-dir: upstream's model_dirs must be used
    try:
        assert httpx.get(server.url + "/v1/models").status_code == 401  # upstream's API key
        listed = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer sk-upstream"})
        assert [m["id"] for m in listed.json()["data"]] == ["tiny"]
    finally:
        assert server.stop() == 0
    output = "".join(server.output)
    assert "an upstream oMLX settings file; converted to omlx's settings" in output
    assert "carried over from upstream oMLX: " in output and "model.model_dirs -> model_dir" in output
    assert "no equivalent in omlx, not used: " in output and "memory.*" in output
    assert "sk-upstream" not in output  # the key is named, never printed

    backups = sorted(home.glob("settings.json.upstream-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == original
    assert stat.S_IMODE(backups[0].stat().st_mode) == 0o600
    stored = json.loads((home / "settings.json").read_text())
    assert stored["api_key"] == "sk-upstream" and stored["model_dir"] == [str(models)]
    assert stored["max_concurrent_requests"] == 3 and "server" not in stored
    assert stat.S_IMODE((home / "settings.json").stat().st_mode) == 0o600

    # The next start reads omlx's own file: nothing converted again.
    again = ServerProcess([], home)
    try:
        assert (
            httpx.get(again.url + "/v1/models", headers={"Authorization": "Bearer sk-upstream"}).status_code
            == 200
        )
    finally:
        assert again.stop() == 0
    assert "upstream oMLX" not in "".join(again.output)
    assert len(list(home.glob("settings.json.upstream-*"))) == 1
