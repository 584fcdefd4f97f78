"""Image parts of chat messages, in the one form the engine side reads.

The API layers turn OpenAI ``image_url`` / Responses ``input_image`` parts and Anthropic
``image`` blocks into ``{"type": "image", "image": URL}`` parts of a message's content list
(next to ``{"type": "text", "text": ...}`` parts, in order); chat templates of vision models
render such a part as the model's image placeholder. A message without images keeps a plain
string content, so text-only requests render exactly as before.
"""

from __future__ import annotations

from typing import List

from . import images
from .limits import ImageLimits


def image_part(url, where: str) -> dict:
    """The image part for ``url``; ValueError (400) for a source the server will not read."""
    images.check_source(url, where, ImageLimits.from_settings().allow_remote)
    return {"type": "image", "image": url}


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def image_urls(messages: List[dict]) -> List[str]:
    """The image sources of ``messages``, in prompt order."""
    urls = []
    for message in messages or ():
        content = message.get("content")
        if isinstance(content, list):
            urls.extend(p["image"] for p in content if isinstance(p, dict) and p.get("type") == "image")
    return urls


def check_count(messages: List[dict], limits: ImageLimits) -> None:
    """ValueError (400) for a request with more images than ``limits.max_images``."""
    count = len(image_urls(messages))
    if count > limits.max_images:
        raise ValueError(
            f"the request has {count} images; this server reads at most {limits.max_images} per request "
            "(setting max_images_per_request, --max-images-per-request)"
        )
