"""Django middleware: who is asking, for every /v1 and /metrics request.

It sets ``request.omlx_key`` (the created key, a ``KeyInfo``; None for the --api-key, for no key
or when omlx runs without keys), ``request.omlx_scopes`` (what the request may do: every scope
for the --api-key and when omlx has no key at all, none without a key) and
``request.omlx_key_labels`` (the /metrics labels, None without a key). A key that is not one of
the server's gets a 401 here, and a client address past the failure limit a 429 (throttle.py),
in the error envelope of the API asked; each route then asks for its scope
(inference/api/common/auth.py: 401 without a key, 403 without the scope).
"""

from __future__ import annotations

import hmac

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.utils.decorators import sync_and_async_middleware

from inference import metrics

from . import scopes
from .ring import get_ring
from .throttle import get_throttle


@sync_and_async_middleware
def api_keys(get_response):
    if iscoroutinefunction(get_response):

        async def middleware(request):
            if not _applies(request.path):
                return await get_response(request)
            await get_ring().arefresh()
            refused = _authenticate_or_refuse(request)
            if refused is not None:
                return refused
            metrics.count_request(request.omlx_key_labels)
            return await get_response(request)
    else:

        def middleware(request):
            if not _applies(request.path):
                return get_response(request)
            get_ring().refresh()
            refused = _authenticate_or_refuse(request)
            if refused is not None:
                return refused
            metrics.count_request(request.omlx_key_labels)
            return get_response(request)

    return middleware


def _applies(path: str) -> bool:
    return path.startswith("/v1/") or path == "/metrics"


def keys_required() -> bool:
    """True when omlx has an --api-key or any created key (else it is open, as before keys)."""
    return bool(settings.OMLX_API_KEY) or bool(get_ring())


def presented(request) -> list:
    """The keys the request carries, in the order tried: ``x-api-key: KEY``, then
    ``Authorization: Bearer KEY`` (a client may send both, one of them a placeholder)."""
    given = [request.headers.get("x-api-key", "").strip()]
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        given.append(header[7:].strip())
    return [g for g in dict.fromkeys(given) if g]


def authenticate(request) -> None:
    """Sets the three attributes (module docstring); raises ApiError 401 or 429. Uses the ring as
    last refreshed (the middleware refreshes it)."""
    from inference.api.common.errors import ApiError

    request.omlx_key = None
    request.omlx_key_labels = None
    secrets = presented(request)
    required = keys_required()
    if not secrets or not required:
        request.omlx_scopes = frozenset() if required else scopes.ALL
        return
    throttle = get_throttle()
    address = request.META.get("REMOTE_ADDR")
    wait = throttle.retry_after(address)
    if wait:
        raise ApiError(
            429,
            f"Too many failed API keys from this address: try again in {wait} s",
            code="too_many_failed_keys",
            headers={"Retry-After": str(wait)},
        )
    admin = settings.OMLX_API_KEY
    if admin and any(hmac.compare_digest(secret.encode(), admin.encode()) for secret in secrets):
        request.omlx_scopes = scopes.ALL
        request.omlx_key_labels = metrics.ADMIN_LABELS
        return
    info = next((i for i in map(get_ring().match, secrets) if i is not None), None)
    if info is None:
        throttle.fail(address)
        raise ApiError(401, "Invalid API key", code="invalid_api_key")
    get_ring().note_use(info)
    request.omlx_key = info
    request.omlx_scopes = info.scopes
    request.omlx_key_labels = info.labels


def _authenticate_or_refuse(request):
    from inference.api.common.errors import ApiError

    try:
        authenticate(request)
    except ApiError as exc:
        return error_response(request.path, exc)
    return None


def error_response(path: str, exc):
    """``exc`` (an ApiError) in the envelope of the API that ``path`` belongs to."""
    if path.startswith("/v1/messages"):
        from inference.api.anthropic.errors import error_response as anthropic_error

        response = anthropic_error(exc.status, exc.message)
        for name, value in exc.headers.items():
            response[name] = value
    else:
        response = exc.response()
    if exc.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response
