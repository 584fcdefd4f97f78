"""Image sources of the chat APIs, decoded to PIL images.

A source is a ``data:`` URL (base64), a local file (a path or a ``file://`` URL), or an
``http(s)://`` URL, which is fetched only when the ``allow_remote_images`` setting is on (off by
default: a server should not fetch what a client names). Every failure is a ValueError whose
message says what is wrong with which image (the API answers 400).
"""

from __future__ import annotations

import base64
import binascii
import io
import urllib.parse
import urllib.request
from pathlib import Path

MAX_IMAGE_BYTES = 32 * 2**20
REMOTE_TIMEOUT_S = 20


def is_remote(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))


def check_source(url: str, where: str, allow_remote: bool) -> None:
    """ValueError (400) for a source the server will not read, before any work is queued."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"{where}: the image url must be a non-empty string")
    if is_remote(url) and not allow_remote:
        raise ValueError(
            f"{where}: http(s) image URLs are not fetched by this server (setting "
            f"allow_remote_images is off); send the image as a data: URL (base64)"
        )
    if not (url.startswith("data:") or is_remote(url) or url.startswith("file://") or url.startswith("/")):
        raise ValueError(
            f"{where}: an image url is a data: URL, an http(s) URL, a file:// URL or an absolute path"
        )


def data_url(media_type: str, data: str) -> str:
    """The data: URL of a base64 payload (Anthropic's ``source``)."""
    return f"data:{media_type};base64,{data}"


def read_bytes(url: str, allow_remote: bool) -> bytes:
    if url.startswith("data:"):
        header, sep, payload = url.partition(",")
        if not sep or not header.endswith(";base64"):
            raise ValueError("a data: image URL must be base64 (data:image/png;base64,...)")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the data: image URL is not valid base64") from None
    if is_remote(url):
        if not allow_remote:
            raise ValueError("http(s) image URLs are not fetched (setting allow_remote_images is off)")
        try:
            with urllib.request.urlopen(url, timeout=REMOTE_TIMEOUT_S) as response:
                data = response.read(MAX_IMAGE_BYTES + 1)
        except Exception as exc:  # URLError, HTTPError, timeouts
            raise ValueError(f"the image {url} cannot be fetched: {exc}") from None
        if len(data) > MAX_IMAGE_BYTES:
            raise ValueError(f"the image {url} is larger than {MAX_IMAGE_BYTES} bytes")
        return data
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path) if url.startswith("file://") else url)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"the image file {path} cannot be read: {exc.strerror or exc}") from None


def load_image(url: str, allow_remote: bool):
    """The RGB PIL image at ``url``."""
    from PIL import Image, UnidentifiedImageError

    data = read_bytes(url, allow_remote)
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ValueError(f"the image is not a readable picture: {exc}") from None
    return image.convert("RGB")
