"""ASGI middleware: a request body over settings.OMLX_MAX_REQUEST_BYTES gets a 413 in the API's
error envelope before Django reads it (Django would spool it to memory or disk first).

A declared Content-Length over the limit is refused at once; a chunked body is counted as it
arrives. (Daphne, on Twisted, has already received the body by then: it keeps it in a temporary
file above 100 KB; the limit protects the JSON parser and the worker.)
"""

from __future__ import annotations

import json

from django.conf import settings


def error_body(path: str, status: int, message: str, code) -> bytes:
    """The error envelope of the API that ``path`` belongs to (Anthropic's for /v1/messages)."""
    if path.startswith("/v1/messages"):
        kinds = {403: "permission_error", 404: "not_found_error", 413: "request_too_large"}
        kind = kinds.get(status, "invalid_request_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class BodyLimitMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = settings.OMLX_MAX_REQUEST_BYTES
        declared = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    return await _reply(send, scope, 400, "Content-Length is not a number", "bad_request")
        if declared is not None:
            if declared > limit:
                return await _too_large(send, scope, limit)
            return await self.app(scope, receive, send)
        # No length declared (chunked): read up to the limit, then hand the body on.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # http.disconnect: nobody to answer
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                return await _too_large(send, scope, limit)
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def _too_large(send, scope, limit: int) -> None:
    await _reply(
        send, scope, 413, f"The request body is larger than the limit of {limit} bytes", "request_too_large"
    )


async def _reply(send, scope, status: int, message: str, code: str) -> None:
    body = error_body(scope.get("path", ""), status, message, code)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
