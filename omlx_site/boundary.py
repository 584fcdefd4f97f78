"""The browser boundary (docs/security.md): what a request's Host, Origin and body type must be
before anything else of omlx sees it. ``BrowserBoundary`` is an ASGI middleware around the whole
application (omlx_site/asgi.py), HTTP and websockets alike.

Every web page the user visits can send requests to 127.0.0.1, and a page whose own name the
attacker points at 127.0.0.1 (DNS rebinding) counts as same-origin with the server. So:

- Host: the loopback names (localhost, 127.0.0.1, [::1]), the --host given (not a wildcard) and
  --allowed-hosts, with any port: Django's ALLOWED_HOSTS, built by ``allowed_hosts``. Another Host
  gets a 400 (a websocket is closed, code 4403). A request without a Host (not a browser) passes.
- Origin: a state-changing request (POST, PUT, PATCH, DELETE) and a websocket handshake carries no
  Origin (not a browser: SDKs, curl), the server's own, or, outside the console, one of
  --cors-origins; any other (a page of another site, a sandboxed frame's "null") gets a 403. The
  named origins get CORS answers, preflights included; the console stays same-origin only.
- Body: a /v1 body is JSON by its Content-Type, else a 415. Without asking (a CORS "simple
  request") a page can send text/plain, a form or multipart, never application/json. No /v1 route
  takes multipart (no file or audio uploads).
- Every answer carries X-Content-Type-Options: nosniff and X-Frame-Options: DENY; the console's
  answers a Content-Security-Policy: scripts, requests and websockets only to the server itself.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from typing import List, Optional
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from omlx_site.body_limit import error_body

logger = logging.getLogger("omlx.boundary")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::", "*")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
# What the OpenAI and Anthropic SDKs send from a browser, besides what a preflight asks for.
CORS_HEADERS = ("authorization", "x-api-key", "content-type", "anthropic-version", "anthropic-beta")
CORS_MAX_AGE = "600"
SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"))
# Inline <style> blocks and style attributes of the templates (and htmx's indicator style) are
# allowed; scripts only as files of this server: no inline script, no eval (htmx's hx-on).
CONSOLE_CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
_NAME = re.compile(r"\.?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?")


def host_entry(name: str) -> str:
    """A host name or address as ALLOWED_HOSTS writes it (an IPv6 address in brackets); a leading
    dot stands for the name and its subdomains. ValueError for a scheme, a port or a path."""
    name = name.strip().lower()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        address = None
    if address is not None:
        return f"[{address.compressed}]" if address.version == 6 else str(address)
    if name != "*" and not _NAME.fullmatch(name):
        raise ValueError(
            f"{name!r}: give a host name or address without a scheme, port or path (every port is allowed)"
        )
    return name


def parse_hosts(text: Optional[str]) -> List[str]:
    """--allowed-hosts (comma-separated) as ALLOWED_HOSTS entries."""
    return [host_entry(part) for part in (text or "").split(",") if part.strip()]


def parse_origins(text: Optional[str]) -> List[str]:
    """--cors-origins (comma-separated): each scheme://host[:port] in lower case, or "*"."""
    origins = []
    for part in (text or "").split(","):
        origin = part.strip().lower().rstrip("/")
        if not origin:
            continue
        if origin != "*":
            url = urlsplit(origin)
            if not url.scheme or not url.netloc or url.path or url.query or url.fragment or "@" in origin:
                raise ValueError(
                    f"{part.strip()!r}: an origin is scheme://host[:port], e.g. http://localhost:3000"
                )
        origins.append(origin)
    return origins


def allowed_hosts(host: str, extra: Optional[str]) -> List[str]:
    """ALLOWED_HOSTS: the loopback names, --host unless it is a wildcard, then --allowed-hosts."""
    names = list(LOOPBACK_HOSTS)
    if host.strip() not in WILDCARD_ADDRESSES:
        try:
            names.append(host_entry(host))
        except ValueError:  # not a name the server could listen on: the listen fails and says so
            pass
    return list(dict.fromkeys(names + parse_hosts(extra)))


def is_loopback(host: str) -> bool:
    """Whether an address to listen on is reachable from this machine only."""
    name = host.strip().lower().strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def network_refusal(values) -> Optional[str]:
    """Why `omlx serve` must not start with these settings (by key): a network address and no key."""
    if values["api_key"] or values["no_auth_on_network"] or is_loopback(values["host"]):
        return None
    return (
        f"--host {values['host'] or '(every address)'} listens on the network, and no API key is set: "
        "anyone who reaches this machine could run and manage models and use the console. Set a key "
        "with --api-key KEY, or serve without one on purpose with --no-auth-on-network (docs/security.md)"
    )


class _Request:
    """The parts of an ASGI scope the boundary reads (header names in lower case)."""

    def __init__(self, scope):
        self.path = scope.get("path", "")
        self.method = scope.get("method", "GET")
        self.websocket = scope["type"] == "websocket"
        self.headers = {}
        for name, value in scope.get("headers") or ():
            self.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
        self.host = self.headers.get("host")
        self.origin = self.headers.get("origin")
        # The console (its pages and websockets) is same-origin only; the API may be shared.
        self.console = self.websocket or self.path == "/admin" or self.path.startswith("/admin/")
        self.preflight = self.method == "OPTIONS" and "access-control-request-method" in self.headers

    def host_allowed(self) -> bool:
        if self.host is None:
            return True
        domain, _ = split_domain_port(self.host)
        return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)

    def same_origin(self) -> bool:
        """The Origin names this Host and port. Its scheme may differ: behind a TLS proxy the page
        is https while this server sees http, and no one else can serve a page on this port."""
        if self.host is None:
            return False
        url = urlsplit(self.origin.lower())
        return url.scheme in ("http", "https") and url.netloc == self.host.lower()

    def cors_origin(self) -> bool:
        """An Origin of another site that --cors-origins names (never for the console)."""
        if self.origin is None or self.console or self.same_origin():
            return False
        named = settings.OMLX_CORS_ORIGIN_LIST
        return "*" in named or self.origin.lower() in named

    def origin_allowed(self) -> bool:
        return self.origin is None or self.same_origin() or self.cors_origin()

    def refusal(self):
        """(status, message, code) when the request must not go on."""
        if not self.host_allowed():
            message = (
                f"Host {self.host!r} is not one of this server's names: it answers localhost, 127.0.0.1, "
                "[::1], its --host and the names of --allowed-hosts (a page that rebinds its name to this "
                "machine is refused)"
            )
            return 400, message, "host_not_allowed"
        if (self.websocket or self.preflight or self.method in UNSAFE_METHODS) and not self.origin_allowed():
            where = "the console" if self.console else "this server"
            hint = "" if self.console else "; name it in --cors-origins to let its pages use the API"
            message = f"Origin {self.origin!r} may not send requests to {where} from a browser{hint}"
            return 403, message, "origin_not_allowed"
        if self.path.startswith("/v1/") and self.method in UNSAFE_METHODS and not self._json_or_empty():
            kind = self.headers.get("content-type") or "none"
            message = f"Content-Type {kind!r}: the body of a /v1 request must be application/json"
            return 415, message, "unsupported_media_type"
        return None

    def _json_or_empty(self) -> bool:
        kind = self.headers.get("content-type")
        if kind is None:
            return self.headers.get("content-length", "0").strip() == "0" and (
                "transfer-encoding" not in self.headers
            )
        return kind.split(";", 1)[0].strip().lower() == "application/json"

    def cors_headers(self, preflight: bool) -> list:
        headers = [(b"access-control-allow-origin", self.origin.encode("latin-1"))]
        if preflight:
            asked = self.headers.get("access-control-request-headers", "")
            names = list(CORS_HEADERS) + [h.strip().lower() for h in asked.split(",") if h.strip()]
            headers += [
                (b"access-control-allow-methods", CORS_METHODS.encode()),
                (b"access-control-allow-headers", ", ".join(dict.fromkeys(names)).encode("latin-1")),
                (b"access-control-max-age", CORS_MAX_AGE.encode()),
            ]
        else:
            headers.append((b"access-control-expose-headers", b"retry-after"))
        return headers

    def answer_headers(self) -> list:
        """The headers every answer to this request gets (when the app has not set them)."""
        headers = list(SECURITY_HEADERS)
        if self.console:
            headers.append((b"content-security-policy", CONSOLE_CSP.encode()))
        elif self.cors_origin():
            headers += self.cors_headers(preflight=False)
        return headers


class BrowserBoundary:
    """The ASGI middleware (see the module): refusals before the app, headers on every answer."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        request = _Request(scope)
        refused = request.refusal()
        if refused is not None:
            status, message, code = refused
            logger.info("refused %s %s: %s", request.method, request.path, message)
            if request.websocket:
                await receive()  # websocket.connect
                return await send({"type": "websocket.close", "code": 4403})
            return await _reply(send, request, status, message, code)
        if request.websocket:
            return await self.app(scope, receive, send)
        if request.preflight and request.cors_origin():
            return await _preflight(send, request)
        return await self.app(scope, receive, _adding(send, request))


def _adding(send, request: _Request):
    extra = request.answer_headers()
    vary = bool(settings.OMLX_CORS_ORIGIN_LIST) and not request.console

    async def send_with_headers(message):
        if message["type"] == "http.response.start":
            message = dict(message, headers=_merge(message.get("headers") or [], extra, vary))
        await send(message)

    return send_with_headers


def _merge(headers, extra, vary: bool) -> list:
    merged = list(headers)
    present = {name.lower() for name, _ in merged}
    merged += [(name, value) for name, value in extra if name not in present]
    if vary:
        for i, (name, value) in enumerate(merged):
            if name.lower() == b"vary":
                if b"origin" not in value.lower():
                    merged[i] = (name, value + b", Origin")
                break
        else:
            merged.append((b"vary", b"Origin"))
    return merged


async def _preflight(send, request: _Request) -> None:
    headers = request.cors_headers(preflight=True) + [(b"vary", b"Origin"), (b"content-length", b"0")]
    headers += SECURITY_HEADERS
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _reply(send, request: _Request, status: int, message: str, code: str) -> None:
    if request.path.startswith("/v1/"):
        body, kind = error_body(request.path, status, message, code), b"application/json"
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    headers += request.answer_headers()
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
