"""A stdio MCP server for the tests: `python tests/support/mcp_servers/stdio_server.py [TOOL...]` (only
the tools named, when any are: a chat test offers the model just the ones it may call)."""

import os
import sys
import time
from typing import Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("omlx-test-stdio")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Repeat the text."""
    return f"echo: {text}"


@server.tool()
def pid() -> int:
    """The server's process id (the tests kill it)."""
    return os.getpid()


@server.tool()
def fail(message: str) -> str:
    """Always fails: a tool error the model should see."""
    raise ToolError(message)


@server.tool()
def forecast(city: Literal["Oslo", "Paris", "Lima"]) -> str:
    """Tomorrow's weather in a city (the arguments of a chat test's model are bounded by the enum)."""
    return {"Oslo": "Oslo: 4 C, snow", "Paris": "Paris: 12 C, rain", "Lima": "Lima: 22 C, sun"}[city]


@server.tool()
def broken(part: Literal["disk", "network"]) -> str:
    """Always fails, with a message naming the part."""
    raise ToolError(f"the {part} is broken")


@server.tool()
def nap(seconds: float) -> str:
    """Sleeps (a tool slower than the call's timeout)."""
    time.sleep(seconds)
    return "rested"


if __name__ == "__main__":
    for name in ("add", "echo", "pid", "fail", "forecast", "broken", "nap"):
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            server.remove_tool(name)
    server.run("stdio")
