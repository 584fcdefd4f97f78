"""API errors in Anthropic's envelope: {"type": "error", "error": {"type", "message"}}, with the
status each kind of error has in Anthropic's API. Installed on the NinjaAPI of the Anthropic
routes (inference/urls.py); the OpenAI routes keep OpenAI's envelope (common/errors.py)."""

from __future__ import annotations

import json
import logging

from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError

from inference.api.common import json_body
from inference.api.common.errors import ApiError, internal_error

logger = logging.getLogger("omlx.api")

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_response(status: int, message: str) -> JsonResponse:
    body = {"type": "error", "error": {"type": error_type(status), "message": message}}
    return JsonResponse(body, status=status)


def install(api) -> None:
    """Every error a route can raise leaves in Anthropic's envelope; bad input is a 4xx."""

    @api.exception_handler(ApiError)
    def api_error(request, exc):
        message = (
            f"{exc.param}: {exc.message}"
            if exc.param and not exc.message.startswith(exc.param)
            else exc.message
        )
        response = error_response(exc.status, message)
        for name, value in getattr(exc, "headers", {}).items():  # e.g. Retry-After with a 429
            response[name] = value
        return response

    @api.exception_handler(ValidationError)
    def validation_error(request, exc):
        if not _is_json_object(request.body):
            return error_response(400, "The request body must be a JSON object")
        first = exc.errors[0] if exc.errors else {}
        loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "payload")]
        message = first.get("msg", "invalid request")
        return error_response(400, f"{'.'.join(loc)}: {message}" if loc else message)

    @api.exception_handler(AuthenticationError)
    def auth_error(request, exc):
        return error_response(401, "Invalid or missing API key")

    @api.exception_handler(RequestDataTooBig)
    def too_big(request, exc):
        return error_response(413, "The request body is too large")

    @api.exception_handler(HttpError)
    def http_error(request, exc):
        message = str(exc)
        if message.startswith("Cannot parse request body"):
            message = json_body.error_message(exc)
        return error_response(exc.status_code, message)

    @api.exception_handler(Exception)
    def server_error(request, exc):
        return error_response(500, internal_error(request, exc))


def _is_json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False
