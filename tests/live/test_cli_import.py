"""`omlx import` as the real command line: a GGUF file in a model directory is listed by `omlx
models` as importable (not served), `omlx import` makes it a servable folder, and a GGUF file of
an architecture omlx does not import exits 2 with the architecture named. (An Ollama model by
its name: tests/unit/test_other_apps.py, in process.)"""

import json
import os
import subprocess
import sys

import pytest

from inference.testkit.gguf_file import write_gguf
from inference.testkit.registry import build_model


def omlx(tmp_path, *args):
    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home"))
    env.pop("OMLX_MODEL_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def listed(tmp_path, model_dir):
    done = omlx(tmp_path, "models", "--model-dir", str(model_dir), "--url", "http://127.0.0.1:9", "--json")
    assert done.returncode == 0, done.stderr
    return {m["id"]: m for m in json.loads(done.stdout)["models"]}


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("import")
    folder = build_model(root / "src" / "tiny", arch="qwen2")
    (root / "downloads").mkdir()
    write_gguf(folder, root / "downloads" / "tiny-qwen2.gguf", "Q8_0")
    write_gguf(folder, root / "downloads" / "phi.gguf", architecture="phi3")
    return root


def test_gguf_is_listed_as_importable_then_imported(gguf_dir, tmp_path):
    models = listed(tmp_path, gguf_dir / "downloads")
    source = gguf_dir / "downloads" / "tiny-qwen2.gguf"
    assert models["tiny-qwen2"]["servable"] is False
    assert models["tiny-qwen2"]["reason"] == f"GGUF: run `omlx import {source}` to serve it"

    done = omlx(tmp_path, "import", str(source), "--model-dir", str(gguf_dir / "models"), "--quantize", "8")
    assert done.returncode == 0, done.stderr
    assert "16 Q8_0 tensors kept as MLX quantized weights (group size 32, exact)" in done.stdout
    assert listed(tmp_path, gguf_dir / "models")["tiny-qwen2"]["servable"] is True
    again = omlx(tmp_path, "import", str(source), "--model-dir", str(gguf_dir / "models"))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_unsupported_architecture_exits_2_with_its_name(gguf_dir, tmp_path):
    done = omlx(
        tmp_path, "import", str(gguf_dir / "downloads" / "phi.gguf"), "--model-dir", str(tmp_path / "m")
    )
    assert done.returncode == 2
    assert (
        "GGUF architecture 'phi3' is not supported; omlx imports llama, qwen2, qwen3, gemma3" in done.stderr
    )
    assert not (tmp_path / "m" / "phi").exists()


def test_a_name_outside_the_model_folder_is_refused(gguf_dir, tmp_path):
    source = str(gguf_dir / "downloads" / "tiny-qwen2.gguf")
    for name in ("../escape", "/tmp/abs", "a/b/c"):
        done = omlx(tmp_path, "import", source, "--model-dir", str(tmp_path / "m"), "--name", name)
        assert done.returncode == 2 and "--name" in done.stderr, name
    assert not (tmp_path / "escape").exists() and not (tmp_path / "m").exists()
