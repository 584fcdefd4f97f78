"""Stored responses (``StoredResponse`` rows): saved when a request has ``store`` (the default,
as OpenAI's), replayed as the context of ``previous_response_id``, listed and deleted by id."""

from __future__ import annotations

from typing import List, Optional

from inference.models import StoredResponse

from inference.api.common.caps import MAX_RESPONSE_CHAIN
from inference.api.common.errors import ApiError


async def get(response_id: str) -> StoredResponse:
    row = await StoredResponse.objects.filter(pk=response_id).afirst()
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
    ``previous_response_id``, oldest first; a chain of more than ``MAX_RESPONSE_CHAIN``
    responses is a 400 (each one is a database read)."""
    chunks: List[List[dict]] = []
    next_id: Optional[str] = previous_response_id
    while next_id is not None:
        if len(chunks) == MAX_RESPONSE_CHAIN:
            raise ApiError(
                400,
                f"previous_response_id: at most {MAX_RESPONSE_CHAIN} responses per chain; start a new "
                "conversation (send the items as input) instead",
                param="previous_response_id",
                code="response_chain_too_long",
            )
        row = await StoredResponse.objects.filter(pk=next_id).afirst()
        if row is None:
            which = (
                ""
                if next_id == previous_response_id
                else f" (a response of its chain, '{next_id}', was deleted)"
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
    deleted, _ = await StoredResponse.objects.filter(pk=response_id).adelete()
    if not deleted:
        raise ApiError(
            404,
            f"No response with id '{response_id}' is stored",
            param="response_id",
            code="response_not_found",
        )
