"""Image sources of the chat APIs, decoded to PIL images.

A source is a ``data:`` URL (base64), a server file (a path or a ``file://`` URL: read only
inside the ``image_dir`` folders, inference.vision.local_files), or an ``http(s)://`` URL
(fetched only when the ``allow_remote_images`` setting is on, never from a non-public address:
inference.vision.remote). Every source is read within the byte cap and the deadline of
``ImageLimits`` (inference.vision.limits); a picture's pixels are counted from its header before it
is decoded, and only common web formats are decoded. Every failure is a ValueError whose message
says what is wrong (the API answers 400).
"""

from __future__ import annotations

import base64
import binascii
import io

from . import local_files, remote
from .limits import ImageLimits

# The formats PIL may decode (OpenAI's and Anthropic's, and BMP); not EPS (Ghostscript), TIFF, ...
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")


def is_remote(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))


def check_source(url, where: str, allow_remote: bool) -> None:
    """ValueError (400) for a source the server will not read, before any work is queued."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"{where}: the image url must be a non-empty string")
    if is_remote(url) and not allow_remote:
        raise ValueError(
            f"{where}: http(s) image URLs are not fetched by this server (setting "
            f"allow_remote_images is off); send the image as a data: URL (base64)"
        )
    if not (url.startswith("data:") or is_remote(url) or local_files.is_local(url)):
        raise ValueError(
            f"{where}: an image url is a data: URL, an http(s) URL, a file:// URL or an absolute path"
        )


def data_url(media_type: str, data: str) -> str:
    """The data: URL of a base64 payload (Anthropic's ``source``)."""
    return f"data:{media_type};base64,{data}"


def read_bytes(url: str, limits: ImageLimits) -> bytes:
    """The bytes of one source, at most ``limits.max_bytes``, read by its deadline."""
    deadline = limits.deadline()
    if url.startswith("data:"):
        header, sep, payload = url.partition(",")
        if not sep or not header.endswith(";base64"):
            raise ValueError("a data: image URL must be base64 (data:image/png;base64,...)")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the data: image URL is not valid base64") from None
        if len(data) > limits.max_bytes:
            raise limits.too_large()
        return data
    if is_remote(url):
        if not limits.allow_remote:
            raise ValueError("http(s) image URLs are not fetched (setting allow_remote_images is off)")
        return remote.fetch(url, limits, deadline)
    if local_files.is_local(url):
        return local_files.read_local(url, limits, deadline)
    raise ValueError("an image url is a data: URL, an http(s) URL, a file:// URL or an absolute path")


def load_image(url: str, limits: ImageLimits):
    """The RGB PIL image at ``url``."""
    from PIL import Image, UnidentifiedImageError

    data = read_bytes(url, limits)
    Image.MAX_IMAGE_PIXELS = limits.max_pixels  # PIL's own check at open: a second net (it errs at 2x)
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)  # lazy: the header only
    except Image.DecompressionBombError:
        raise _too_many_pixels(None, limits) from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ValueError(f"the image is not a readable picture ({', '.join(FORMATS)}): {exc}") from None
    if image.width * image.height > limits.max_pixels:  # before a pixel is decoded
        raise _too_many_pixels(image.size, limits)
    try:
        image.load()
        return image.convert("RGB")
    except (OSError, ValueError) as exc:
        raise ValueError(f"the image is not a readable picture: {exc}") from None


def _too_many_pixels(size, limits: ImageLimits) -> ValueError:
    shown = f"{size[0]}x{size[1]} pixels" if size else "too many pixels"
    return ValueError(
        f"the image has {shown}, more than {limits.max_pixels / 1e6:g} megapixels "
        "(setting max_image_megapixels, --max-image-megapixels)"
    )
