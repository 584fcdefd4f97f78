"""Pictures and chat messages for the vision tests: random-noise PNGs made from a seed (of any
size: another size is another image grid), data URLs, an OpenAI image_url message, an Anthropic
image block and a greedy reply to it."""

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


def write_pictures(folder, shapes) -> list:
    """``noise_png(seed, shape)`` for seeds 1, 2, ... and ``shapes``, written into ``folder``
    (made here) as image{seed}.png: their paths."""
    folder.mkdir()
    paths = []
    for seed, shape in enumerate(shapes, start=1):
        path = folder / f"image{seed}.png"
        path.write_bytes(noise_png(seed, shape))
        paths.append(path)
    return paths


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def image_message(url: str, text: str = PROMPT) -> list:
    return [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
        }
    ]


def anthropic_image_message(png: bytes, text: str = PROMPT) -> list:
    """An Anthropic Messages user turn: the PNG as a base64 image block, then ``text``."""
    image = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png).decode()}
    return [{"role": "user", "content": [{"type": "image", "source": image}, {"type": "text", "text": text}]}]


def anthropic_image_reply(url: str, model: str, png: bytes, max_tokens: int) -> str:
    """The text of ``model``'s greedy reply (Anthropic SDK) to the PNG and PROMPT at ``url``; its
    input tokens are what count_tokens says (the processor's image tokens counted alike)."""
    from tests.support.sdk_clients import anthropic_client

    messages = anthropic_image_message(png)
    with anthropic_client(url, timeout=300) as c:
        message = c.messages.create(
            model=model, max_tokens=max_tokens, extra_body={"temperature": 0}, messages=messages
        )
        count = c.messages.count_tokens(model=model, messages=messages)
    assert count.input_tokens == message.usage.input_tokens + message.usage.cache_read_input_tokens
    return "".join(b.text for b in message.content if b.type == "text")


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
