"""The one place that decides a request's cache salt: the prefix-cache namespace it shares blocks
in (``cache.block_key.salted_root``; vLLM's ``cache_salt``). Requests with different salts never
share a cached block, in RAM or on disk, so ``cached_tokens`` tells a client nothing about the
prompts of clients with another salt (docs/cache.md).

Salts are namespaced by who chose them, so no request can name another's namespace: a salt from
a request body is ``"body:" + salt``; a request made with a created API key (``omlx keys``) that
does not share its cache (``--share-cache``) is salted by that key, ``"key:<id>"``, before any body
salt (``"key:<id>|body:..."``), so one key's clients never see another's prompts through
``cached_tokens``; the console's chat has its own (``CONSOLE_SALT``); any other request without a
salt (no keys, the --api-key admin key, a sharing key) keeps the unsalted cache (None), whose keys
are those of omlx before salts.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from .errors import ApiError

MAX_CACHE_SALT_CHARS = 256
CONSOLE_SALT = "console"  # every console chat; API bodies cannot reach it (theirs are "body:...")


def cache_salt_field() -> Any:
    """The ``cache_salt`` field of a request schema: its limits are in the OpenAPI schema (for
    clients and the fuzzer) and checked by ``effective_salt``, for one message on every API."""
    return Field(
        None,
        description="Requests with different salts never share cached KV blocks (docs/cache.md).",
        json_schema_extra={"minLength": 1, "maxLength": MAX_CACHE_SALT_CHARS},
    )


def effective_salt(request, body_salt: Optional[str]) -> Optional[str]:
    """The salt of an API request (``request``: the Django request; ``request.omlx_key``, set by
    inference.keys.middleware, is the created key it came with) given its body's ``cache_salt``;
    ApiError 400 for an empty or too long one."""
    key = getattr(request, "omlx_key", None)
    own = None if key is None or key.shares_cache else f"key:{key.id}"
    if body_salt is None:
        return own
    if not isinstance(body_salt, str) or not body_salt:
        raise ApiError(400, "cache_salt: must be a non-empty string", param="cache_salt")
    if len(body_salt) > MAX_CACHE_SALT_CHARS:
        raise ApiError(
            400,
            f"cache_salt: at most {MAX_CACHE_SALT_CHARS} characters (got {len(body_salt)})",
            param="cache_salt",
        )
    return "body:" + body_salt if own is None else f"{own}|body:{body_salt}"


def console_salt() -> str:
    """The salt of the console's chat: its conversations share blocks with each other (and
    survive restarts in the cold tier), never with API clients."""
    return CONSOLE_SALT
