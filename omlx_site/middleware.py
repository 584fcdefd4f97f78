"""Django middleware: an error that Django or django-ninja answers outside the API's own handlers
(an unknown /v1 path: 404 page; a wrong method: 405 text) leaves in the API's JSON error envelope."""
from __future__ import annotations

from django.http import HttpResponse

from omlx_site.body_limit import error_body

_MESSAGES = {404: "Unknown route", 405: "Method not allowed", 500: "Internal error"}


class ApiErrorEnvelopeMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (request.path.startswith("/v1/") and response.status_code >= 400
                and not response.get("Content-Type", "").startswith("application/json")
                and not getattr(response, "streaming", False)):
            status = response.status_code
            message = f"{_MESSAGES.get(status, 'Error')}: {request.method} {request.path}"
            replaced = HttpResponse(error_body(request.path, status, message, None), status=status,
                                    content_type="application/json")
            if response.has_header("Allow"):
                replaced["Allow"] = response["Allow"]
            return replaced
        return response
