"""The model registry: discovery at depth 1, the demo model fallback, one load per model."""
import threading

import pytest

import inference.engine
from inference import demo_model
from inference.model_registry import ModelRegistry, discover_models


def make_model_folder(path, weights=True):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if weights:
        (path / "model.safetensors").write_bytes(b"")


def test_discovery(tmp_path):
    make_model_folder(tmp_path / "b-model")
    make_model_folder(tmp_path / "a-model")
    make_model_folder(tmp_path / "no-weights", weights=False)
    make_model_folder(tmp_path / "nested" / "deeper")
    (tmp_path / "file.txt").write_text("x")
    assert list(discover_models(tmp_path)) == ["a-model", "b-model"]
    assert discover_models(tmp_path / "missing") == {}


def test_demo_model_when_the_folder_is_empty(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_model, "demo_model_path", lambda: tmp_path / "demo")
    registry = ModelRegistry(tmp_path / "models")
    assert registry.models() == {"omlx-demo": tmp_path / "demo"}
    make_model_folder(tmp_path / "models" / "mine")
    assert registry.ids() == ["mine"]


class FakeEngine:
    loads = 0

    def __init__(self, path, **settings):
        FakeEngine.loads += 1
        self.path, self.settings, self.closed = path, settings, False
        threading.Event().wait(0.05)  # a slow load, so that the threads below overlap

    def close(self):
        self.closed = True


def test_one_load_per_model_and_close(tmp_path, monkeypatch):
    monkeypatch.setattr(inference.engine, "Engine", FakeEngine)
    make_model_folder(tmp_path / "m")
    registry = ModelRegistry(tmp_path, {"max_concurrent_requests": 3})
    got = []
    threads = [threading.Thread(target=lambda: got.append(registry.engine("m"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert FakeEngine.loads == 1
    assert len({id(e) for e in got}) == 1
    assert got[0].settings == {"max_concurrent_requests": 3}
    assert registry.loaded("m") is got[0]
    with pytest.raises(KeyError):
        registry.engine("other")
    registry.close()
    assert got[0].closed
    with pytest.raises(RuntimeError):
        registry.engine("m")
