"""API errors in OpenAI's envelope: {"error": {"message", "type", "param", "code"}}.

Statuses: 400 bad input (malformed JSON, wrong types, out-of-range values, a prompt or prompt +
max_tokens beyond the model's context), 401 API key (missing or wrong), 403 a key without
the route's scope (inference/keys/scopes.py), 404 unknown model or route, 413 body over
settings.OMLX_MAX_REQUEST_BYTES, 429 too many requests in flight for a model or too many failed keys
from one address (Retry-After), 503
shutting down, no worker, or short of memory (the memory guard; Retry-After). omlx never answers
422: validation errors are 400s, as OpenAI's are.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Dict, Optional

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError

from . import json_body

logger = logging.getLogger("omlx.api")

_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
    507: "server_error",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: Optional[str] = None,
        code: Optional[str] = None,
        type: Optional[str] = None,
        headers: Optional[Dict[str, str]] = None,
    ):
        super().__init__(message)
        self.headers = dict(headers or {})
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "invalid_request_error")

    @classmethod
    def bad_value(cls, exc: ValueError) -> "ApiError":
        """From a ValueError of SamplingParams / the engine ("name=value: why")."""
        match = re.match(r"(\w+)=", str(exc))
        return cls(400, str(exc), param=match.group(1) if match else None)

    def response(self) -> JsonResponse:
        body = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        response = JsonResponse({"error": body}, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response

    @classmethod
    def too_large(cls, limit: int) -> "ApiError":
        return cls(
            413, f"The request body is larger than the limit of {limit} bytes", code="request_too_large"
        )


def install(api) -> None:
    """Every error a route can raise leaves in the envelope; bad input is a 4xx, never a 500."""

    @api.exception_handler(ApiError)
    def api_error(request, exc):
        return exc.response()

    @api.exception_handler(ValidationError)
    def validation_error(request, exc):
        if not _is_json_object(request.body):
            return ApiError(400, "The request body must be a JSON object").response()
        first = exc.errors[0] if exc.errors else {}
        loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "payload")]
        param = ".".join(loc) or None
        message = first.get("msg", "invalid request")
        return ApiError(400, f"{param}: {message}" if param else message, param=param).response()

    @api.exception_handler(AuthenticationError)
    def auth_error(request, exc):
        return ApiError(401, "Invalid or missing API key", code="invalid_api_key").response()

    @api.exception_handler(HttpError)
    def http_error(request, exc):
        message = str(exc)
        if message.startswith("Cannot parse request body"):
            message = json_body.error_message(exc)
        return ApiError(exc.status_code, message).response()

    @api.exception_handler(RequestDataTooBig)
    def too_big(request, exc):
        return ApiError.too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE).response()

    @api.exception_handler(Exception)
    def server_error(request, exc):
        return ApiError(500, internal_error(request, exc)).response()


def internal_error(request, exc: BaseException) -> str:
    """Log an unexpected error with its traceback and an incident id; the client's message names
    only the id: exception text may hold paths, prompts or keys (docs/security.md)."""
    incident = uuid.uuid4().hex[:12]
    logger.error("unhandled error in %s (incident %s)", request.path, incident, exc_info=exc)
    return f"Internal error (incident {incident}: the details are in the server's log)"


def _is_json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False
