"""GET /health: whether this server takes requests, for load balancers, supervisors and scripts.

200 ``{"status": "ok", ...}`` when it does; 503 while it starts (pinned models still loading),
while it shuts down (after SIGTERM/SIGINT, during the grace period), or when no worker can take a
request (Redis mode without `omlx worker`, Redis unreachable). Never asks for the API key, so it
says nothing secret: the status, the version, and each servable model's state in this process
(``loaded``, ``loading`` or ``unloaded``; no paths, settings or requests).
"""

from __future__ import annotations

from django.http import JsonResponse

from inference import lifecycle
from inference.version import version

from inference.api.common import limits
from inference.api.common.errors import ApiError


def view(request):
    if request.method not in ("GET", "HEAD"):
        response = JsonResponse(
            {
                "error": {
                    "message": f"{request.method} is not allowed on /health; use GET",
                    "type": "invalid_request_error",
                }
            },
            status=405,
        )
        response["Allow"] = "GET, HEAD"
        return response
    status, detail = "ok", None
    if lifecycle.shutting_down():
        status, detail = "shutting_down", "the server is stopping: new requests get a 503"
    elif lifecycle.starting():
        status, detail = "starting", "pinned models are still loading"
    else:
        try:
            limits.check_workers()
        except ApiError as exc:
            status, detail = "unavailable", exc.message
    body = {"status": status, "version": version(), "models": _model_states()}
    if detail:
        body["detail"] = detail
    response = JsonResponse(body, status=200 if status == "ok" else 503)
    response["Cache-Control"] = "no-store"
    return response


def _model_states() -> dict:
    from inference.pool import get_pool

    try:
        return get_pool().states()
    except Exception:  # a pool that cannot scan (closing, a folder gone) must not fail the check
        return {}
