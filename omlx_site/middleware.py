"""Django middleware: an error that Django or django-ninja answers outside the API's own handlers
(an unknown /v1 path: 404 page; a wrong method: 405 text) leaves in the API's JSON error envelope;
every answered request is counted for /metrics (``request_metrics``).

Every middleware of the stack is async-capable, so that an async view (the API's generation
routes) runs on the server's event loop with no thread hop around it: a single sync-only
middleware makes Django run the whole stack in a thread and the async view back on the loop
(``async_to_sync``), which cost milliseconds per request (docs/benchmarks.md). Django's own
SecurityMiddleware, SessionMiddleware and CommonMiddleware hop to a thread for each of their hooks
in async mode; ``SecurityMiddleware`` etc. below run those hooks on the loop instead (they do no
I/O), except a session save (a database write), which still goes to a thread.
"""

from __future__ import annotations

import re

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.sessions import middleware as sessions
from django.http import HttpResponse
from django.middleware import common, security
from django.utils.decorators import sync_and_async_middleware

from inference import metrics
from omlx_site.body_limit import error_body

_MESSAGES = {404: "Unknown route", 405: "Method not allowed", 500: "Internal error"}


@sync_and_async_middleware
def api_error_envelope(get_response):
    """Django's own 404/405 answers (HTML or text) on /v1 paths, replaced by the API's JSON error."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            return _envelope(request, await get_response(request))
    else:

        def middleware(request):
            return _envelope(request, get_response(request))

    return middleware


def _envelope(request, response):
    if (
        request.path.startswith("/v1/")
        and response.status_code >= 400
        and not response.get("Content-Type", "").startswith("application/json")
        and not getattr(response, "streaming", False)
    ):
        status = response.status_code
        message = f"{_MESSAGES.get(status, 'Error')}: {request.method} {request.path}"
        replaced = HttpResponse(
            error_body(request.path, status, message, None), status=status, content_type="application/json"
        )
        if response.has_header("Allow"):
            replaced["Allow"] = response["Allow"]
        return replaced
    return response


@sync_and_async_middleware
def request_metrics(get_response):
    """Counts every answered request in /metrics (``omlx_http_requests_total``) by the route's
    pattern (``/v1/models/{model_id}/unload``, not the path asked for), method and status. The
    first middleware, so it sees the status the client gets."""

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


def _on_loop(middleware_class, response_in_thread=None):
    """``middleware_class`` (a Django ``MiddlewareMixin`` whose hooks do no I/O) with its
    ``process_request`` and ``process_response`` called on the event loop in async mode, not each
    in a thread; ``response_in_thread(request)`` true: that response hook goes to a thread."""

    class OnLoop:
        sync_capable = True
        async_capable = True

        def __init__(self, get_response):
            self.get_response = get_response
            self.inner = middleware_class(get_response)
            self.async_mode = iscoroutinefunction(get_response)
            if self.async_mode:
                markcoroutinefunction(self)

        def __call__(self, request):
            if self.async_mode:
                return self._acall(request)
            return self.inner(request)

        async def _acall(self, request):
            response = self.inner.process_request(request)
            response = response or await self.get_response(request)
            if response_in_thread is not None and response_in_thread(request):
                return await sync_to_async(self.inner.process_response, thread_sensitive=True)(
                    request, response
                )
            return self.inner.process_response(request, response)

    OnLoop.__name__ = OnLoop.__qualname__ = middleware_class.__name__
    OnLoop.__doc__ = f"{middleware_class.__module__}.{middleware_class.__name__}, its hooks run on the loop."
    return OnLoop


def _saves_session(request) -> bool:
    session = getattr(request, "session", None)
    return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


SecurityMiddleware = _on_loop(security.SecurityMiddleware)
SessionMiddleware = _on_loop(sessions.SessionMiddleware, response_in_thread=_saves_session)
CommonMiddleware = _on_loop(common.CommonMiddleware)
