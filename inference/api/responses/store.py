"""Stored responses (``StoredResponse`` rows): saved when a request has ``store`` (the default,
as OpenAI's), replayed as the context of ``previous_response_id``, listed and deleted by id.

They hold prompts, so they do not stay forever: a row older than OMLX_RESPONSE_TTL_DAYS is gone
for every lookup at once, and deleted at start and every hour (``delete_expired``, a Huey periodic
task in inference/tasks.py). A chain longer than OMLX_MAX_RESPONSE_CHAIN responses is refused
with a 400 (each request replays the whole chain)."""

from __future__ import annotations

from datetime import timedelta
from typing import List, Optional

from django.conf import settings
from django.utils import timezone

from inference.models import StoredResponse

from inference.api.common.errors import ApiError


def _live():
    """The rows not yet expired."""
    cutoff = timezone.now() - timedelta(days=settings.OMLX_RESPONSE_TTL_DAYS)
    return StoredResponse.objects.filter(created__gte=cutoff)


def delete_expired() -> int:
    """Delete the rows older than the TTL; how many."""
    cutoff = timezone.now() - timedelta(days=settings.OMLX_RESPONSE_TTL_DAYS)
    deleted, _ = StoredResponse.objects.filter(created__lt=cutoff).delete()
    return deleted


async def get(response_id: str) -> StoredResponse:
    row = await _live().filter(pk=response_id).afirst()
    if row is None:
        raise ApiError(
            404,
            f"No response with id '{response_id}' is stored",
            param="response_id",
            code="response_not_found",
        )
    return row


async def context(previous_response_id: str) -> List[dict]:
    """Input and output items of every response of the chain ending at
    ``previous_response_id``, oldest first."""
    limit = settings.OMLX_MAX_RESPONSE_CHAIN
    chunks: List[List[dict]] = []
    next_id: Optional[str] = previous_response_id
    while next_id is not None:
        if len(chunks) >= limit:
            raise ApiError(
                400,
                f"The conversation of '{previous_response_id}' is longer than {limit} responses "
                "(OMLX_MAX_RESPONSE_CHAIN): start a new one with the context as input",
                param="previous_response_id",
                code="response_chain_too_long",
            )
        row = await _live().filter(pk=next_id).afirst()
        if row is None:
            which = (
                ""
                if next_id == previous_response_id
                else f" (a response of its chain, '{next_id}', was deleted or has expired)"
            )
            raise ApiError(
                400,
                f"Previous response with id '{previous_response_id}' not found{which}",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        chunks.append(row.input_items + row.body["output"])
        next_id = row.previous_response_id
    return [item for chunk in reversed(chunks) for item in chunk]


async def save(body: dict, input_items: List[dict]) -> None:
    await StoredResponse.objects.acreate(
        id=body["id"],
        model=body["model"],
        input_items=input_items,
        body=body,
        previous_response_id=body.get("previous_response_id"),
    )


async def delete(response_id: str) -> None:
    deleted, _ = await _live().filter(pk=response_id).adelete()
    if not deleted:
        raise ApiError(
            404,
            f"No response with id '{response_id}' is stored",
            param="response_id",
            code="response_not_found",
        )
