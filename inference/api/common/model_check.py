"""The one check every generation route makes before it queues a job: the model exists."""

from __future__ import annotations

from inference.pool import get_pool

from .errors import ApiError


def check_model(model_id: str) -> None:
    """ApiError 404 (code model_not_found, param model) when no servable model has this id or
    alias; each API's error envelope (OpenAI's, Anthropic's) formats it."""
    pool = get_pool()
    if pool.path(model_id) is None:
        raise ApiError(404, pool.not_found_message(model_id), param="model", code="model_not_found")
