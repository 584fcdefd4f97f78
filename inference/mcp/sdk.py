"""The official MCP SDK (the `mcp` package) is an optional extra: ``pip install 'omlx[mcp]'``.

Only this module decides whether it is there; everything that needs it calls ``require()`` and
gets ``MCPUnavailable`` with one clear message (what to install, how to run without MCP) instead
of an ImportError from deep inside.
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'omlx[mcp]'"


class MCPUnavailable(RuntimeError):
    """The `mcp` package cannot be imported."""


def message(reason: str) -> str:
    return (
        f"MCP servers (--mcp-config) need the MCP SDK, which is not installed ({reason}). "
        f"Install it with: {INSTALL_HINT}   (or start without MCP: --mcp-config '')"
    )


def require():
    """The `mcp` package, or MCPUnavailable saying how to install it."""
    try:
        import mcp
        from mcp.client.stdio import stdio_client  # noqa: F401  (the parts omlx uses)
        from mcp.client.streamable_http import streamable_http_client  # noqa: F401
    except ImportError as exc:
        raise MCPUnavailable(message(str(exc))) from None
    return mcp
