"""The one check every generation route makes before it queues a job: the model exists."""

from __future__ import annotations

from inference.pool import get_pool

from . import caps
from .errors import ApiError


def check_model(model_id: str) -> None:
    """ApiError 404 (code model_not_found, param model) when no servable model has this id or
    alias; each API's error envelope (OpenAI's, Anthropic's) formats it. A name longer than
    ``caps.MAX_MODEL_CHARS`` is a 400 (it would be echoed in the answer)."""
    caps.chars(model_id, caps.MAX_MODEL_CHARS, "model")
    pool = get_pool()
    if pool.path(model_id) is None:
        raise ApiError(404, pool.not_found_message(model_id), param="model", code="model_not_found")
