"""API errors in OpenAI's envelope: {"error": {"message", "type", "param", "code"}}."""
from __future__ import annotations

import logging
import re
from typing import Optional

from django.http import JsonResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError

logger = logging.getLogger("omlx.api")

_TYPES = {401: "authentication_error", 404: "invalid_request_error", 500: "server_error",
          503: "server_error", 507: "server_error"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, type: Optional[str] = None):
        super().__init__(message)
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
        return JsonResponse({"error": body}, status=self.status)


def install(api) -> None:
    """Every error a route can raise leaves in the envelope; bad input is a 4xx, never a 500."""

    @api.exception_handler(ApiError)
    def api_error(request, exc):
        return exc.response()

    @api.exception_handler(ValidationError)
    def validation_error(request, exc):
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
            message = "The request body is not valid JSON"
        return ApiError(exc.status_code, message).response()

    @api.exception_handler(Exception)
    def server_error(request, exc):
        logger.exception("unhandled error in %s", request.path)
        return ApiError(500, f"Internal error: {type(exc).__name__}: {exc}").response()
