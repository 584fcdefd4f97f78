"""Image sources (inference/vision/images.py) and key ids (inference/vision/prompt.py), without
a server: what is read, what is refused and with which message."""

import base64
import io

import numpy as np
import pytest

from inference.vision import images
from inference.vision.prompt import KEY_ID_BASE, key_id


def _png(color) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(out, format="PNG")
    return out.getvalue()


def test_sources_read_the_same_picture(tmp_path):
    png = _png((10, 20, 30))
    path = tmp_path / "a picture.png"
    path.write_bytes(png)
    urls = ["data:image/png;base64," + base64.b64encode(png).decode(), str(path), path.as_uri()]
    pictures = [np.asarray(images.load_image(url, allow_remote=False)) for url in urls]
    assert all((p == pictures[0]).all() for p in pictures) and pictures[0][0, 0].tolist() == [10, 20, 30]


@pytest.mark.parametrize(
    "url, allow, message",
    [
        ("http://example.invalid/x.png", False, "allow_remote_images"),
        ("https://example.invalid/x.png", False, "allow_remote_images"),
        ("relative/x.png", False, "an image url is"),
        ("", False, "non-empty"),
    ],
)
def test_check_source_refuses(url, allow, message):
    with pytest.raises(ValueError, match=message):
        images.check_source(url, "messages[0].content[0]", allow)


def test_remote_allowed_passes_the_check_and_reports_fetch_failures():
    images.check_source("http://127.0.0.1:9/x.png", "x", allow_remote=True)
    with pytest.raises(ValueError, match="cannot be fetched"):
        images.load_image("http://127.0.0.1:9/x.png", allow_remote=True)


@pytest.mark.parametrize(
    "url, message",
    [
        ("data:image/png,rawbytes", "must be base64"),
        ("data:image/png;base64,@@@", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"GIF89a-no").decode(), "not a readable picture"),
    ],
)
def test_bad_payloads(url, message):
    with pytest.raises(ValueError, match=message):
        images.load_image(url, allow_remote=False)


def test_key_ids_are_outside_every_vocabulary_and_depend_on_image_and_index():
    a, b = b"a" * 32, b"b" * 32
    ids = [key_id(a, i) for i in range(64)]
    assert all(KEY_ID_BASE <= t < 2 * KEY_ID_BASE for t in ids)
    assert len(set(ids)) == 64  # distinct within an image
    assert not set(ids) & {key_id(b, i) for i in range(64)}  # and between images
    assert ids == [key_id(a, i) for i in range(64)]  # stable


@pytest.mark.parametrize(
    "config, vision, reason",
    [
        ({"model_type": "llava", "vision_config": {}, "text_config": {"model_type": "llama"}}, True, None),
        ({"model_type": "gemma3", "vision_config": {}, "text_config": {}}, True, None),
        (
            {"model_type": "qwen2_vl", "vision_config": {}, "text_config": {}},
            True,
            None,
        ),  # M-RoPE, served with images
        ({"model_type": "qwen3_vl", "vision_config": {}, "text_config": {}}, True, None),
        # A multimodal checkpoint mlx-lm reads as text, of a family not served with images, stays a
        # text model.
        (
            {"model_type": "pixtral", "vision_config": {}, "text_config": {"model_type": "mistral"}},
            False,
            None,
        ),
        (
            {"model_type": "mistral3", "vision_config": {}, "text_config": {"model_type": "mistral"}},
            True,
            None,
        ),
        ({"model_type": "unknown_vl", "vision_config": {}}, False, "is not served yet"),
    ],
)
def test_discovery_of_vision_folders(tmp_path, config, vision, reason):
    import json

    from inference.pool.discovery import inspect

    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    folder = inspect("m", tmp_path)
    assert folder.vision is vision
    assert (folder.reason is None) if reason is None else (reason in folder.reason)


def test_a_vision_folder_without_its_tower_stays_a_text_model(tmp_path, model_dir):
    """mlx-lm's conversion of a VLM keeps ``vision_config`` but drops the vision tower: such a
    Gemma 3 folder is listed without vision and served as text by mlx-lm, as before."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from inference.engine.model_loader import load_model
    from inference.pool.discovery import inspect

    folder = tmp_path / "gemma3-text"
    shutil.copytree(model_dir("gemma3", "tiny"), folder)
    assert inspect("whole", model_dir("gemma3", "tiny")).vision
    weights = load_file(str(folder / "model.safetensors"))
    save_file(
        {k: v for k, v in weights.items() if k.startswith("language_model.")},
        str(folder / "model.safetensors"),
    )
    listed = inspect("text", folder)
    assert listed.vision is False and listed.reason is None
    loaded = load_model(folder)
    assert loaded.vision is None and loaded.model_type == "gemma3"
