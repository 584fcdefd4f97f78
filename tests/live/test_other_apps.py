"""Other apps' models through a real `omlx serve --lmstudio-models DIR --ollama-models DIR`: LM
Studio's MLX folder is served in place (a chat completion), /v1/models and `omlx models` say
where each model came from, Ollama's models are listed by their Ollama names to import, and
`omlx models` without the settings (off) lists none of them."""

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.support.other_apps_trees import (
    LMSTUDIO_GGUF,
    LMSTUDIO_MLX,
    OLLAMA_LIBRARY,
    OLLAMA_NAMESPACED,
    OLLAMA_OTHER_REGISTRY,
    build_lmstudio,
    build_ollama,
)
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def trees(tmp_path_factory, model_dir):
    base = tmp_path_factory.mktemp("other-apps")
    return build_lmstudio(base / "lmstudio", model_dir("qwen2", "tiny")), build_ollama(base / "ollama", base)


@pytest.fixture(scope="module")
def server(tmp_path_factory, trees):
    lmstudio, ollama = trees
    home = tmp_path_factory.mktemp("home")
    args = [
        "--model-dir",
        str(home / "models"),
        "--lmstudio-models",
        str(lmstudio),
        "--ollama-models",
        str(ollama),
    ]
    server = ServerProcess(args, home)
    yield server
    server.stop()


def test_lmstudio_mlx_folder_is_served_in_place(server, trees):
    listed = httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]
    assert [(m["id"], m["origin"]) for m in listed] == [(LMSTUDIO_MLX, "LM Studio")]
    reply = httpx.post(
        f"{server.url}/v1/chat/completions",
        timeout=300,
        json={"model": LMSTUDIO_MLX, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] >= 1
    rows = {r["id"]: r for r in httpx.get(f"{server.url}/v1/models/status", timeout=60).json()["data"]}
    assert rows[LMSTUDIO_MLX]["path"] == str(trees[0] / LMSTUDIO_MLX)  # nothing copied
    assert rows[LMSTUDIO_MLX]["loaded"] and not rows[LMSTUDIO_MLX]["importable"]


def test_ollama_and_gguf_models_are_listed_to_import(server, trees):
    rows = {r["id"]: r for r in httpx.get(f"{server.url}/v1/models/status", timeout=60).json()["data"]}
    for model_id in (OLLAMA_LIBRARY, OLLAMA_NAMESPACED, OLLAMA_OTHER_REGISTRY):
        row = rows[model_id]
        assert (row["origin"], row["importable"], row["servable"]) == ("Ollama", True, False)
        assert row["path"].startswith(str(trees[1] / "blobs" / "sha256-"))
        assert "import to serve" in row["reason"]
    assert rows[LMSTUDIO_GGUF]["origin"] == "LM Studio" and rows[LMSTUDIO_GGUF]["importable"]
    reply = httpx.post(
        f"{server.url}/v1/chat/completions",
        timeout=60,
        json={"model": OLLAMA_LIBRARY, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code in (400, 404) and "import to serve" in reply.text  # never a 500


def test_omlx_models_lists_the_origin_and_off_lists_none(server, trees, tmp_path):
    def models(*args, **env):
        environ = dict(os.environ, OMLX_HOME=str(tmp_path / "home"), **env)
        out = subprocess.run(
            [sys.executable, "-m", "omlx_site.cli", "models", "--json", *args],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return {r["id"]: r for r in json.loads(out.stdout)["models"]}

    served = models("--url", server.url)
    assert served[LMSTUDIO_MLX]["origin"] == "LM Studio" and served[OLLAMA_LIBRARY]["origin"] == "Ollama"
    # On disk (no server answers), from the settings: LM Studio searched, Ollama off.
    on_disk = models(
        "--url",
        "http://127.0.0.1:9",
        "--model-dir",
        str(tmp_path / "none"),
        OMLX_LMSTUDIO_MODELS=str(trees[0]),
    )
    assert {r["origin"] for r in on_disk.values()} == {"LM Studio"}
    assert set(on_disk) == {LMSTUDIO_MLX, LMSTUDIO_GGUF}
