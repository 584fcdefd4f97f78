"""Shared by the console's in-process view tests: a real model pool over tiny models in a temp
folder, the settings pointing at it, and Django's test client."""

import shutil
import time

import pytest
from django.test import Client, override_settings

from inference.pool import close_pool, get_pool


@pytest.fixture
def console(tmp_path, model_dir):
    """A Client on a console whose pool serves "tiny", its copy "tiny2" and "other" (and lists
    the unservable "broken"), with its cold tier in tmp_path/"cold"."""
    models = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny2")  # same weights: same fingerprint
    shutil.copytree(model_dir("llama", "tiny"), models / "other")
    (models / "broken").mkdir()
    (models / "broken" / "model.safetensors").write_bytes(b"")
    close_pool()
    with override_settings(
        OMLX_MODEL_DIR=models,
        OMLX_MODEL_DIRS=[models],
        OMLX_API_KEY=None,
        OMLX_COLD_CACHE_DIR=tmp_path / "cold",
        OMLX_COLD_CACHE_MAX_BYTES=None,
        OMLX_COLD_CACHE_TTL_SECONDS=None,
        OMLX_HOT_CACHE_MAX_SIZE="64MB",
        OMLX_MAX_MODEL_MEMORY=None,
    ):
        yield Client()
        close_pool()


def wait_until(check, timeout=120.0):
    """Poll ``check`` until it returns something true (what the page shows after a background job)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s: {check}")
        time.sleep(0.05)


def post(client, url, data):
    return client.post(url, data, HTTP_HX_REQUEST="true")


def generate(model_id, prompt, max_tokens=3):
    """One greedy request through the pool's engine; its RequestOutput events' last one."""
    from inference.engine import SamplingParams

    with get_pool().lease(model_id) as engine:
        stream = engine.submit(prompt, SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    return list(stream)[-1]
