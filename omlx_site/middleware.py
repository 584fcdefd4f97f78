"""Django middleware: an error that Django or django-ninja answers outside the API's own handlers
(an unknown /v1 path: 404 page; a wrong method: 405 text) leaves in the API's JSON error envelope;
every answered request is counted for /metrics (``request_metrics``)."""
from __future__ import annotations

import re

from asgiref.sync import iscoroutinefunction
from django.http import HttpResponse
from django.utils.decorators import sync_and_async_middleware

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


@sync_and_async_middleware
def request_metrics(get_response):
    """Counts every answered request in /metrics (``omlx_http_requests_total``) by the route's
    pattern (``/v1/models/{model_id}/unload``, not the path asked for), method and status. The
    first middleware, so it sees the status the client gets."""
    from inference import metrics

    def count(request, response) -> None:
        method = request.method if request.method in _METHODS else "other"
        metrics.HTTP_REQUESTS.labels(_endpoint(request), method, str(response.status_code)).inc()

    if iscoroutinefunction(get_response):
        async def middleware(request):
            response = await get_response(request)
            count(request, response)
            return response
    else:
        def middleware(request):
            response = get_response(request)
            count(request, response)
            return response
    return middleware


def _endpoint(request) -> str:
    """A bounded label: the matched route pattern; static files and unknown paths each as one."""
    if request.path.startswith("/static/"):
        return "/static/"
    match = getattr(request, "resolver_match", None)
    if match is not None and match.route:
        return "/" + _NINJA_PARAM.sub(r"{\1}", match.route)
    return "(unmatched)"


_NINJA_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
