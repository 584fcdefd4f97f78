"""Shared fixtures: test model folders and live servers, built once per session; the kind markers.

The tree says what a test needs: tests/unit (data structures, tiny models, in-process clients),
tests/reference (greedy output against transformers or mlx-lm), tests/live (a real `omlx serve` or
another real process), tests/e2e (a browser), tests/soak (minutes of load: marked ``slow`` too, so
out of the default run). tests/support holds the helpers, which are not tests."""

import os
from pathlib import Path

import inference  # noqa: F401  (loads the fast CPU BLAS before anything imports mlx)

import pytest

# The machine's Hugging Face cache, LM Studio's and Ollama's models stay out of the tests (and of
# the servers they start): a test that wants one passes --hf-cache DIR (--lmstudio-models DIR, ...).
os.environ["OMLX_HF_CACHE"] = "off"
os.environ["OMLX_LMSTUDIO_MODELS"] = os.environ["OMLX_OLLAMA_MODELS"] = "off"  # other apps' models too

from inference.testkit.registry import build_model


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


TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "reference", "live", "e2e", "soak")


def pytest_collection_modifyitems(config, items):
    """Each test gets the marker of its directory; a soak test is also ``slow`` (not the default run)."""
    for item in items:
        kind = Path(item.path).resolve().relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)
            if kind == "soak":
                item.add_marker("slow")


@pytest.fixture(scope="session")
def serve(tmp_path_factory, model_dir):
    """serve(*flags, models=SPEC, **env) -> a live `omlx serve --model-dir DIR *flags`, shared.

    SPEC names the served folders: ``{"tiny": ("qwen2", "tiny")}`` (the default) serves
    model_dir("qwen2", "tiny") as "tiny". Every caller with the same models, flags and environment
    gets the same process, started on first use and stopped at the end of the session; so only
    tests that leave the server as they found it may use it (no loads or unloads a later test
    would see, no settings, no signals, no memory limits: those start their own ServerProcess).
    """
    import shutil
    import signal
    import subprocess

    from tests.support.server import ServerProcess

    servers = {}

    def get(*flags, models=None, **env):
        models = models or {"tiny": ("qwen2", "tiny")}
        key = (tuple(sorted(models.items())), flags, tuple(sorted(env.items())))
        if key not in servers:
            root = tmp_path_factory.mktemp("served-models")
            for name, (arch, preset) in models.items():
                shutil.copytree(model_dir(arch, preset), root / name)
            home = tmp_path_factory.mktemp("omlx-home")
            servers[key] = ServerProcess(["--model-dir", str(root), *flags], home, env=env)
        return servers[key]

    yield get
    # All at once: each takes seconds to shut down, and they do it in parallel.
    for server in servers.values():
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in servers.values():
        try:
            server.process.wait(60)
        except subprocess.TimeoutExpired:
            server.stop()  # its threads' stacks go to the output, then it is killed


@pytest.fixture(scope="session")
def omlx_server(serve):
    """The live `omlx serve` most API tests share: the tiny qwen2 test model as "tiny", no flags."""
    return serve()


@pytest.fixture(scope="session")
def vision_server(serve, tmp_path_factory):
    """(the live server tests/live/test_vision*.py share, its --image-dir): each module writes the
    files it names into its own subfolder."""
    from tests.support.vision_pictures import SERVED_MODELS

    image_dir = tmp_path_factory.mktemp("vision-images")
    return serve("--image-dir", str(image_dir), models=SERVED_MODELS), image_dir
