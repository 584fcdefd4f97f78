"""Pictures and chat messages for the vision tests: random-noise PNGs made from a seed (of any
size: another size is another image grid), data URLs, an OpenAI image_url message."""

import base64
import io

import numpy as np

PROMPT = "What is in this picture? Describe it."
# The one server of tests/live/test_vision.py and test_vision_families.py (conftest's serve):
# name -> (arch, preset). Each module asks only its own models.
SERVED_MODELS = {
    "vlm": ("llava", "tiny"),
    "tiny": ("qwen2", "tiny"),
    **{family: (family, "tiny") for family in ("qwen2_5_vl", "qwen3_vl", "gemma3", "mistral3")},
}


def noise_png(seed: int, shape=(60, 60)) -> bytes:
    from PIL import Image

    pixels = (np.random.default_rng(seed).random(shape + (3,)) * 255).astype("uint8")
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def image_message(url: str, text: str = PROMPT) -> list:
    return [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
        }
    ]


def bomb_png(width: int, height: int) -> bytes:
    """A 1-bit grayscale PNG of width x height black pixels, a few KB however large (a
    decompression bomb: decoded to RGB it takes 3 bytes a pixel), written row by row."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\0" * (1 + (width + 7) // 8)  # filter byte 0, then the packed bits
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
