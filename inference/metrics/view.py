"""GET /metrics (omlx_site/urls.py)."""

from __future__ import annotations

from .definitions import CONTENT_TYPE, render


def view(request):
    """GET /metrics: every series in Prometheus' text format; a key with the admin scope when keys are set."""
    from django.http import HttpResponse, HttpResponseNotAllowed

    from inference.api.common.auth import check_api_key
    from inference.api.common.errors import ApiError
    from inference.keys import scopes

    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    try:
        check_api_key(request, scopes.ADMIN)
    except ApiError as exc:
        response = exc.response()
        response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(render(), content_type=CONTENT_TYPE)
