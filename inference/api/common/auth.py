"""Each route's scope check. Who is asking was settled by inference/keys/middleware.py (the
--api-key, a created key, or nobody); here a route says which scope it needs (inference/keys/
scopes.py): 401 without a key where keys are required, 403 for a key without the scope."""

from __future__ import annotations

from inference.keys import scopes as scope_names
from inference.keys.middleware import authenticate

from .errors import ApiError


def check_api_key(request, scope: str) -> None:
    if not hasattr(request, "omlx_scopes"):  # not through the middleware (an in-process call)
        authenticate(request)
    if scope in request.omlx_scopes:
        return
    key = getattr(request, "omlx_key", None)
    if key is None:
        raise ApiError(401, "Invalid or missing API key", code="invalid_api_key")
    has = ", ".join(scope_names.ordered(key.scopes)) or "none"
    raise ApiError(
        403,
        f"The API key {key.name!r} does not have the {scope!r} scope that this route needs "
        f"(its scopes: {has}); create a key with `omlx keys create --scope {scope}`",
        code="insufficient_scope",
    )
