"""The optional API key (`omlx serve --api-key`): `Authorization: Bearer KEY` or `x-api-key: KEY`."""

from __future__ import annotations

import hmac

from django.conf import settings

from .errors import ApiError


def check_api_key(request) -> None:
    expected = settings.OMLX_API_KEY
    if not expected:
        return
    candidates = [request.headers.get("x-api-key", "")]
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        candidates.append(header[7:].strip())
    if not any(hmac.compare_digest(given.encode(), expected.encode()) for given in candidates):
        raise ApiError(401, "Invalid or missing API key", code="invalid_api_key")
