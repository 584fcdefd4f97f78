"""A streamable-HTTP MCP server for the tests: `python tests/support/mcp_servers/http_server.py TOKEN
[PORT]`. It binds 127.0.0.1 (port 0: a free one), prints ``port N`` once it listens, and
refuses requests without the header ``X-Token: TOKEN`` (how omlx's ``headers`` are tested)."""

import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("omlx-test-http")


@server.tool()
def weather(city: str) -> str:
    """The weather in a city (always the same)."""
    return f"sunny in {city}"


def require_token(app, token: str):
    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"x-token", b"").decode() != token:
            await send(
                {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
            )
            await send({"type": "http.response.body", "body": b"missing or wrong X-Token"})
            return
        await app(scope, receive, send)

    return guarded


async def main(token: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    app = server.streamable_http_app()
    config = uvicorn.Config(require_token(app, token), log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(f"port {sock.getsockname()[1]}", flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
