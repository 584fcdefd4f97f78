"""The browser boundary (omlx_site/boundary.py) of a live `omlx serve`: the Host allow-list, the
Origin allow-list and CORS answers, JSON-only /v1 bodies, the security headers, and the refusal
to serve a network address without an API key.

One server for the module, started as a user who means it: every address, no key
(--no-auth-on-network), one more Host name and one browser app's origin."""

import json
import socket
import subprocess
import sys

import httpx
import pytest

from tests.support.server import ServerProcess

APP = "http://app.example:3000"  # the browser app named in --cors-origins
EVIL = "http://evil.example"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    import shutil

    models = tmp_path_factory.mktemp("boundary-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    flags = ["--model-dir", str(models), "--host", "0.0.0.0", "--no-auth-on-network"]
    flags += ["--allowed-hosts", "omlx.lan", "--cors-origins", APP]
    process = ServerProcess(flags, tmp_path_factory.mktemp("boundary-home"))
    process.port = int(process.url.rsplit(":", 1)[1])
    yield process
    process.stop()


def call(server, method, path, host=None, origin=None, **kwargs):
    headers = dict(kwargs.pop("headers", {}))
    if host:
        headers["Host"] = host
    if origin:
        headers["Origin"] = origin
    return httpx.request(method, server.url + path, headers=headers, timeout=60, **kwargs)


def test_wildcard_address_is_announced_on_loopback_with_the_named_hosts(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert any("other machines' names for it: omlx.lan" in line for line in server.output)


def test_only_the_servers_own_names_are_answered(server):
    port = server.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"OMLX.lan:{port}", "localhost"):
        assert call(server, "GET", "/v1/models", host=host).status_code == 200, host
    # A page whose name was rebound to this machine (DNS rebinding) reads nothing.
    api = call(server, "GET", "/v1/models", host=f"rebind.example:{port}")
    assert api.status_code == 400 and api.json()["error"]["code"] == "host_not_allowed"
    console = call(server, "GET", "/admin/status/", host=f"rebind.example:{port}")
    assert console.status_code == 400 and "not one of this server's names" in console.text
    assert "omlx" not in console.text.lower().split("'")[0]  # the message, not a page
    for refused in (api, console):
        assert refused.headers["x-content-type-options"] == "nosniff"
        assert refused.headers["x-frame-options"] == "DENY"


def handshake(server, host=None, origin=None, path="/ws/admin/status/") -> str:
    """The status line the server answers a websocket handshake with."""
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host or f'127.0.0.1:{server.port}'}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if origin:
        lines.append(f"Origin: {origin}")
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return sock.makefile("rb").readline().decode().strip()


def test_console_websockets_need_an_own_host_and_origin(server):
    own = f"http://127.0.0.1:{server.port}"
    assert " 101 " in handshake(server)  # not a browser: no Origin
    assert " 101 " in handshake(server, origin=own)
    assert " 403 " in handshake(server, host=f"rebind.example:{server.port}")
    assert " 403 " in handshake(server, origin=EVIL)
    assert " 403 " in handshake(server, origin="null")  # a sandboxed frame, a file:// page
    assert " 403 " in handshake(server, origin=APP)  # --cors-origins is for the API, not the console


def test_state_changing_requests_from_other_origins_get_a_403(server):
    own = f"http://127.0.0.1:{server.port}"
    refused = call(server, "POST", "/v1/chat/completions", origin=EVIL, json=CHAT)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "origin_not_allowed" and "--cors-origins" in error["message"]
    anthropic = call(server, "POST", "/v1/messages", origin="null", json=dict(CHAT, max_tokens=1))
    assert anthropic.status_code == 403 and anthropic.json()["error"]["type"] == "permission_error"
    for method, path in (("POST", "/v1/models/tiny/unload"), ("DELETE", "/v1/responses/resp_x")):
        assert call(server, method, path, origin=EVIL).status_code == 403, path
    console = call(server, "POST", "/admin/models/action/", origin=APP, data={"action": "rescan"})
    assert console.status_code == 403 and "the console" in console.text
    # Not a browser, or the server's own page: served.
    assert call(server, "POST", "/v1/chat/completions", json=CHAT).status_code == 200
    assert call(server, "POST", "/v1/chat/completions", origin=own, json=CHAT).status_code == 200
    read = call(server, "GET", "/v1/models", origin=EVIL)  # reads: the browser keeps the answer
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


def test_named_origins_get_cors_answers(server):
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-stainless-os"}
    preflight = call(server, "OPTIONS", "/v1/chat/completions", origin=APP, headers=asked)
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == APP
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = preflight.headers["access-control-allow-headers"]
    for name in ("authorization", "x-api-key", "content-type", "x-stainless-os"):
        assert name in allowed
    assert "Origin" in preflight.headers["vary"]
    answer = call(server, "POST", "/v1/chat/completions", origin=APP, json=CHAT)
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == APP
    assert "Origin" in answer.headers["vary"]
    for origin, path in ((EVIL, "/v1/chat/completions"), (APP, "/admin/models/action/")):
        refused = call(server, "OPTIONS", path, origin=origin, headers=asked)
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers


def test_v1_bodies_must_be_json(server):
    body = json.dumps(CHAT)
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        refused = call(server, "POST", "/v1/chat/completions", content=body, headers={"Content-Type": kind})
        assert refused.status_code == 415, kind
        assert refused.json()["error"]["code"] == "unsupported_media_type"
    multipart = call(server, "POST", "/v1/chat/completions", files={"body": ("body.json", body)})
    assert multipart.status_code == 415  # no /v1 route takes uploads
    no_type = call(server, "POST", "/v1/chat/completions", content=body)
    assert no_type.status_code == 415
    anthropic = call(server, "POST", "/v1/messages", content=body, headers={"Content-Type": "text/plain"})
    assert anthropic.status_code == 415 and anthropic.json()["type"] == "error"
    json_utf8 = {"Content-Type": "Application/JSON; charset=utf-8"}
    assert call(server, "POST", "/v1/chat/completions", content=body, headers=json_utf8).status_code == 200
    assert call(server, "POST", "/v1/models/rescan").status_code == 200  # no body, no type


def test_every_answer_is_nosniff_and_unframed_and_the_console_has_a_csp(server):
    api = call(server, "GET", "/v1/models")
    console = call(server, "GET", "/admin/status/")
    for answer in (api, console, call(server, "GET", "/health")):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
    assert "content-security-policy" not in api.headers
    policy = console.headers["content-security-policy"]
    for rule in ("script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "object-src 'none'"):
        assert rule in policy
    scripts = policy.split("script-src")[1].split(";")[0]
    assert "unsafe-eval" not in policy and "unsafe-inline" not in scripts
    # Auth is off on a network address: every page says so.
    assert 'id="auth-off-notice"' in console.text and "--no-auth-on-network" in console.text


def test_a_network_address_without_a_key_refuses_to_start(tmp_path):
    for host in ("0.0.0.0", "192.0.2.7"):
        process = subprocess.Popen(
            [sys.executable, "-m", "omlx_site.cli", "serve", "--host", host, "--port", "0"],
            env={**_env(), "OMLX_HOME": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output = []
        for line in process.stdout:  # ends when it exits; a server that started is stopped
            output.append(line)
            if line.startswith("omlx serving"):
                process.terminate()
        assert process.wait(60) == 2, "".join(output)
        text = "".join(output)
        assert "--api-key" in text and "--no-auth-on-network" in text and host in text


def _env():
    import os

    env = dict(os.environ)
    for name in ("OMLX_API_KEY", "OMLX_HOST", "OMLX_NO_AUTH_ON_NETWORK"):
        env.pop(name, None)
    return env
