"""Image sources (inference/vision/images.py) and key ids (inference/vision/prompt.py), without
a server: what is read, what is refused and with which message; the byte, pixel and count caps.
Server files: tests/unit/test_vision_local_files.py; http(s): tests/unit/test_vision_remote.py."""

import base64
import io

import numpy as np
import pytest

from inference.vision import images, parts
from inference.vision.limits import ImageLimits
from inference.vision.prompt import KEY_ID_BASE, key_id
from tests.support.vision_pictures import bomb_png


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
    limits = ImageLimits(image_dirs=(tmp_path.resolve(),))
    pictures = [np.asarray(images.load_image(url, limits)) for url in urls]
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


def test_remote_allowed_passes_the_check_and_refuses_loopback():
    images.check_source("http://127.0.0.1:9/x.png", "x", allow_remote=True)
    with pytest.raises(ValueError, match="127.0.0.1, a loopback address"):
        images.load_image("http://127.0.0.1:9/x.png", ImageLimits(allow_remote=True))


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
        images.load_image(url, ImageLimits())


def test_only_web_formats_are_decoded():
    """PIL reads many formats (EPS runs Ghostscript); omlx decodes PNG, JPEG, WebP, GIF, BMP."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, format="TIFF")
    with pytest.raises(ValueError, match="not a readable picture"):
        images.load_image(
            "data:image/tiff;base64," + base64.b64encode(out.getvalue()).decode(), ImageLimits()
        )


def test_a_data_url_over_the_byte_cap_is_refused():
    url = "data:image/png;base64," + base64.b64encode(_png((1, 2, 3))).decode()
    images.load_image(url, ImageLimits(max_bytes=4096))
    with pytest.raises(ValueError, match="larger than 64 bytes"):
        images.load_image(url, ImageLimits(max_bytes=64))


def test_pixels_are_counted_from_the_header_before_decoding():
    """A 20 KB PNG of 13,000 x 13,000 pixels (500 MB as RGB) and one of 6,000 x 6,000 (within
    PIL's own 2x limit: only the pixel cap refuses it) are refused before a pixel is decoded;
    a picture under the cap is read."""
    limits = ImageLimits(max_pixels=25_000_000)
    for width, height, said in ((13_000, 13_000, "too many"), (6_000, 6_000, "6000x6000")):
        url = "data:image/png;base64," + base64.b64encode(bomb_png(width, height)).decode()
        with pytest.raises(ValueError, match=f"has {said} pixels, more than 25 megapixels"):
            images.load_image(url, limits)
    url = "data:image/png;base64," + base64.b64encode(bomb_png(4_000, 4_000)).decode()
    assert images.load_image(url, limits).size == (4_000, 4_000)


def test_the_image_count_cap():
    message = {"role": "user", "content": [{"type": "image", "image": "data:,"}] * 3}
    parts.check_count([message], ImageLimits(max_images=3))
    with pytest.raises(ValueError, match="has 4 images; this server reads at most 3"):
        parts.check_count(
            [message, {"role": "user", "content": message["content"][:1]}], ImageLimits(max_images=3)
        )


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
