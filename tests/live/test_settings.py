"""Settings (omlx_site/config.py): precedence flag > environment > settings.json > default, flags
saved by `omlx serve` and in force after a restart, a corrupt or wrong settings file never fatal."""

import json
import os
import shutil
import stat
import subprocess
import sys

import httpx
import pytest

from omlx_site import config
from tests.support.server import ServerProcess

COMPLETIONS = "/v1/completions"


def load(home, cli=None, environ=None):
    warnings = []
    values = config.load(home, cli=cli, environ=environ or {}, warn=warnings.append)
    return values, warnings


def write(home, data):
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(data if isinstance(data, str) else json.dumps(data))


def test_each_level_wins_over_the_next(tmp_path):
    values, warnings = load(tmp_path)
    assert (values["max_queued_requests"], values["max_request_size"], warnings) == (256, 32 * 2**20, [])
    assert (
        values["model_dir"] == [tmp_path / "models"] and values["paged_ssd_cache_dir"] == tmp_path / "cache"
    )

    write(tmp_path, {"max_queued_requests": 7, "max_request_size": "64KiB", "paged_ssd_cache_dir": "off"})
    values, _ = load(tmp_path)
    assert (values["max_queued_requests"], values["max_request_size"]) == (7, 65536)
    assert values["paged_ssd_cache_dir"] is None

    env = {"OMLX_MAX_QUEUED_REQUESTS": "9", "OMLX_MAX_REQUEST_BYTES": "2048", "OMLX_MODEL_DIR": ""}
    values, _ = load(tmp_path, environ=env)
    assert (values["max_queued_requests"], values["max_request_size"]) == (9, 2048)
    assert values["model_dir"] == [tmp_path / "models"]  # an empty variable counts as unset

    values, _ = load(tmp_path, cli={"max_queued_requests": 11}, environ=env)
    assert (values["max_queued_requests"], values["max_request_size"]) == (11, 2048)


def test_wrong_values_in_the_file_are_ignored_one_by_one(tmp_path):
    write(
        tmp_path,
        {
            "max_queued_requests": "lots",
            "max_concurrent_requests": 0,
            "port": True,
            "sse_keepalive_seconds": [1],
            "hot_cache_max_size": "1MB",
            "api_handoff": "fast",
            "model_dir": 5,
            "a_future_setting": 1,
        },
    )
    values, warnings = load(tmp_path)
    assert values["hot_cache_max_size"] == "1MB"  # the good key is used
    assert (
        values["max_queued_requests"],
        values["max_concurrent_requests"],
        values["port"],
        values["sse_keepalive_seconds"],
        values["api_handoff"],
    ) == (256, 16, 8000, 10.0, "huey")
    assert values["model_dir"] == [tmp_path / "models"]
    for key in (
        "max_queued_requests",
        "max_concurrent_requests",
        "port",
        "sse_keepalive_seconds",
        "api_handoff",
        "model_dir",
        "a_future_setting",
    ):
        assert any(key in w for w in warnings), (key, warnings)
    assert "hot_cache_max_size" not in " ".join(warnings)
    config.save({"max_queued_requests": 3}, tmp_path)
    stored = json.loads((tmp_path / "settings.json").read_text())
    assert stored["a_future_setting"] == 1 and stored["max_queued_requests"] == 3  # unknown keys kept


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "", "\udcff"])
def test_a_corrupt_file_is_moved_aside(tmp_path, text):
    tmp_path.joinpath("settings.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    values, warnings = load(tmp_path)
    assert values["max_queued_requests"] == 256
    aside = list(tmp_path.glob("settings.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == text.encode("utf-8", "surrogateescape")
    assert not (tmp_path / "settings.json").exists()
    assert len(warnings) == 1 and str(aside[0]) in warnings[0]


def test_a_bad_environment_variable_names_itself(tmp_path):
    with pytest.raises(ValueError, match="OMLX_MAX_QUEUED_REQUESTS='lots'"):
        load(tmp_path, environ={"OMLX_MAX_QUEUED_REQUESTS": "lots"})
    env = dict(os.environ, OMLX_HOME=str(tmp_path), OMLX_MAX_REQUEST_BYTES="10")
    out = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "serve"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and "OMLX_MAX_REQUEST_BYTES" in out.stderr


def test_saved_file_keeps_other_keys_and_is_private(tmp_path):
    config.save({"api_key": "k1", "model_dir": [tmp_path / "a", tmp_path / "b"]}, tmp_path)
    config.save({"port": 0}, tmp_path)
    path = tmp_path / "settings.json"
    assert json.loads(path.read_text()) == {
        "api_key": "k1",
        "port": 0,
        "model_dir": [str(tmp_path / "a"), str(tmp_path / "b")],
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    values, _ = load(tmp_path)
    assert values["model_dir"] == [tmp_path / "a", tmp_path / "b"] and values["api_key"] == "k1"


def test_flags_are_saved_and_stay_in_force_after_a_restart(tmp_path, model_dir):
    models, home = tmp_path / "models", tmp_path / "home"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    big = json.dumps({"model": "tiny", "prompt": "a" * 70000})
    small = {"model": "tiny", "prompt": "hello", "max_tokens": 2}
    proc = ServerProcess(
        ["--model-dir", str(models), "--api-key", "sekrit", "--max-request-size", "64KiB"], home
    )
    proc.stop()
    stored = json.loads((home / "settings.json").read_text())
    assert stored["api_key"] == "sekrit" and stored["max_request_size"] == 65536
    assert stored["model_dir"] == [str(models.resolve())]

    proc = ServerProcess([], home)  # no flags: the saved ones apply
    try:
        assert any(
            "settings.json: " in line and "max_request_size=65536" in line and "api_key=***" in line
            for line in proc.output
        ), proc.output
        assert not any("sekrit" in line for line in proc.output)  # the key is never printed
        auth = {"authorization": "Bearer sekrit"}
        assert httpx.get(proc.url + "/v1/models").status_code == 401
        assert [m["id"] for m in httpx.get(proc.url + "/v1/models", headers=auth).json()["data"]] == ["tiny"]
        response = httpx.post(
            proc.url + COMPLETIONS,
            content=big,
            timeout=60,
            headers={**auth, "content-type": "application/json"},
        )
        assert response.status_code == 413
        assert httpx.post(proc.url + COMPLETIONS, json=small, headers=auth, timeout=60).status_code == 200
    finally:
        proc.stop()

    proc = ServerProcess(["--api-key", "other", "--max-request-size", "1MiB"], home)  # a flag wins
    try:
        assert (
            httpx.get(proc.url + "/v1/models", headers={"authorization": "Bearer other"}).status_code == 200
        )
        response = httpx.post(
            proc.url + COMPLETIONS,
            content=big,
            timeout=60,
            headers={"authorization": "Bearer other", "content-type": "application/json"},
        )
        assert response.status_code != 413  # (too long a prompt for the model: a 400)
    finally:
        proc.stop()
    assert json.loads((home / "settings.json").read_text())["api_key"] == "other"


def test_the_server_starts_with_a_corrupt_settings_file(tmp_path, model_dir):
    models, home = tmp_path / "models", tmp_path / "home"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    write(home, '{"max_queued_requests": 3,')
    proc = ServerProcess(["--model-dir", str(models)], home)
    try:
        assert [m["id"] for m in httpx.get(proc.url + "/v1/models").json()["data"]] == ["tiny"]
        assert any("settings.json: not JSON" in line and "moved to" in line for line in proc.output)
    finally:
        proc.stop()
    assert len(list(home.glob("settings.json.corrupt-*"))) == 1
    assert json.loads((home / "settings.json").read_text())["model_dir"] == [str(models.resolve())]


def test_describe_gives_each_value_and_its_source(tmp_path, monkeypatch):
    write(tmp_path, {"max_queued_requests": 7, "api_key": "hush"})
    monkeypatch.setenv("OMLX_HOME", str(tmp_path))
    monkeypatch.setenv("OMLX_RETRY_AFTER_SECONDS", "4")
    monkeypatch.delenv("OMLX_API_KEY", raising=False)
    monkeypatch.delenv("OMLX_MAX_QUEUED_REQUESTS", raising=False)
    rows = {row["key"]: row for row in config.describe()}
    assert set(rows) == set(config.BY_KEY)
    assert (rows["max_queued_requests"]["value"], rows["max_queued_requests"]["source"]) == (7, "file")
    assert (rows["retry_after_seconds"]["value"], rows["retry_after_seconds"]["source"]) == (4, "environment")
    assert (rows["api_key"]["value"], rows["api_key"]["secret"]) == ("***", True)
    assert rows["port"]["source"] == "default" and rows["port"]["flag"] == "--port"
    json.dumps(list(rows.values()))  # plain data


def test_a_flag_given_empty_removes_the_saved_value(tmp_path):
    """`omlx serve --api-key ''` forgets a saved key: the server then answers without one."""
    home = tmp_path / "home"
    write(home, {"api_key": "old", "max_queued_requests": 5})
    proc = ServerProcess(["--model-dir", str(tmp_path / "none"), "--api-key", ""], home)
    try:
        assert httpx.get(proc.url + "/v1/models").status_code == 200
    finally:
        proc.stop()
    assert json.loads((home / "settings.json").read_text()) == {
        "max_queued_requests": 5,
        "port": 0,
        "model_dir": [str((tmp_path / "none").resolve())],
    }


def test_booleans(tmp_path):
    for raw, value in [("true", True), ("0", False), (True, True), ("Off", False)]:
        assert config.BOOLEAN.parse(raw) is value
    for raw in ("maybe", 1, None):
        with pytest.raises(ValueError):
            config.BOOLEAN.parse(raw)
