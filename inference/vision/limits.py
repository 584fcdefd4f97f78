"""What a request may make the server read as images: the settings of image sources, built once
per request (``ImageLimits.from_settings``), and the one bounded read every source goes through.

Every source has a byte cap and a deadline (a data: URL is already in memory: its cap is checked
on its length), every picture a pixel cap read from its header before it is decoded, every
request a cap on its images. See docs/vision.md ("Where images come from").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Tuple

CHUNK = 64 * 1024


@dataclass(frozen=True)
class ImageLimits:
    """The image settings of one request. ``image_dirs`` are resolved folders (symlinks
    followed): local files are read only inside them; none: no local file is read."""

    image_dirs: Tuple[Path, ...] = ()
    allow_remote: bool = False
    max_bytes: int = 20 * 2**20
    timeout: float = 20.0
    max_pixels: int = 25_000_000
    max_images: int = 16

    @classmethod
    def from_settings(cls) -> "ImageLimits":
        """The limits of this process's settings (the defaults outside a configured Django process)."""
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        try:
            dirs = settings.OMLX_IMAGE_DIR
        except ImproperlyConfigured:  # a library use without Django settings: the safe defaults
            return cls()
        return cls(
            image_dirs=tuple(Path(d).resolve() for d in dirs or ()),
            allow_remote=bool(settings.OMLX_ALLOW_REMOTE_IMAGES),
            max_bytes=settings.OMLX_MAX_IMAGE_BYTES,
            timeout=settings.OMLX_IMAGE_TIMEOUT_SECONDS,
            max_pixels=int(settings.OMLX_MAX_IMAGE_MEGAPIXELS * 1_000_000),
            max_images=settings.OMLX_MAX_IMAGES_PER_REQUEST,
        )

    def deadline(self) -> float:
        """The time.monotonic() by which one image's reading must end."""
        return time.monotonic() + self.timeout

    def too_large(self) -> ValueError:
        return ValueError(
            f"the image is larger than {self.max_bytes} bytes (setting max_image_size, --max-image-size)"
        )

    def too_slow(self) -> ValueError:
        return ValueError(
            f"the image was not read within {self.timeout:g} s (setting image_timeout, --image-timeout)"
        )


def remaining(deadline: float, limits: ImageLimits) -> float:
    """Seconds left before ``deadline``; ValueError (too slow) when none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise limits.too_slow()
    return left


def read_capped(read: Callable[[int], bytes], limits: ImageLimits, deadline: float) -> bytes:
    """All bytes of ``read(n)`` (a file's or a socket's read; b"" at the end), refusing past
    ``limits.max_bytes`` or ``deadline``: never more than max_bytes + one chunk is held, so an
    endless source (a device, a server that never stops sending) ends in a ValueError."""
    chunks, size = [], 0
    while True:
        remaining(deadline, limits)
        chunk = read(CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limits.max_bytes:
            raise limits.too_large()
        chunks.append(chunk)
