"""Shared fixtures: test model folders built once per session."""
import inference  # noqa: F401  (loads the fast CPU BLAS before anything imports mlx)

import pytest

from inference.model_factory import build_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """model_dir(arch="qwen2", preset="tiny", **overrides) -> Path of a built model folder."""
    built = {}

    def get(arch="qwen2", preset="tiny", **overrides):
        key = (arch, preset, tuple(sorted(overrides.items())))
        if key not in built:
            path = tmp_path_factory.mktemp(f"model-{arch}-{preset}")
            built[key] = build_model(path, arch=arch, preset=preset, **overrides)
        return built[key]

    return get
