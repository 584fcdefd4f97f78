"""The MCP routes (omlx's and upstream oMLX's, not in OpenAI's API):

    GET  /v1/mcp/servers   each server of --mcp-config: name, transport, state (starting, running,
                           crashed, restarting, stopped), tool count, last error, restarts
    GET  /v1/mcp/tools     the running servers' tools in OpenAI's tool form, named SERVER__TOOL:
                           ready to pass as ``tools`` to /v1/chat/completions
    POST /v1/mcp/execute   run one: {"tool_name": "SERVER__TOOL" (or "server" and "tool"),
                           "arguments": {...} (or its JSON text), "timeout": seconds}

Statuses of execute: 200 with the result (``is_error`` true when the tool itself failed: a
result for the model, not an error of the call); 400 bad body or arguments that break the tool's
input schema; 404 no MCP servers configured, no such server or tool; 503 the server is not
running now (crashed, restarting); 504 the tool did not answer in time; 502 the server answered
the call with a protocol error.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ninja import Router, Schema
from pydantic import ConfigDict, Field

from inference.mcp import connection
from inference.mcp.manager import BadArguments, UnknownTool, get_manager
from inference.mcp.tools import full_name, split_name

from inference.api.common.auth import check_api_key
from inference.keys import scopes
from inference.api.common.errors import ApiError

router = Router(tags=["omlx MCP"])


class ExecuteBody(Schema):
    model_config = ConfigDict(extra="allow")
    tool_name: Optional[str] = None
    server: Optional[str] = None
    tool: Optional[str] = None
    arguments: Any = None
    timeout: Optional[float] = Field(default=None, gt=0, le=3600)


@router.get("/mcp/servers")
def mcp_servers(request):
    check_api_key(request, scopes.MCP)
    manager = get_manager()
    return {"object": "list", "data": manager.servers() if manager is not None else []}


@router.get("/mcp/tools")
def mcp_tools(request):
    check_api_key(request, scopes.MCP)
    manager = get_manager()
    return {
        "object": "list",
        "data": [t.openai_tool() for t in manager.tools()] if manager is not None else [],
    }


@router.post("/mcp/execute")
async def mcp_execute(request, body: ExecuteBody):
    check_api_key(request, scopes.MCP)
    manager = get_manager()
    if manager is None:
        raise ApiError(
            404,
            "No MCP servers are configured (start omlx with --mcp-config FILE)",
            code="mcp_not_configured",
        )
    name = _tool_name(body)
    arguments = _arguments(body.arguments)
    try:
        result = await manager.execute(name, arguments, body.timeout)
    except UnknownTool as exc:
        raise ApiError(404, str(exc), param="tool_name", code="tool_not_found") from None
    except BadArguments as exc:
        raise ApiError(400, str(exc), param="arguments") from None
    except connection.NotRunning as exc:
        raise ApiError(503, str(exc), code="mcp_server_unavailable") from None
    except connection.ToolTimeout as exc:
        raise ApiError(504, str(exc), code="mcp_timeout", type="server_error") from None
    except connection.ToolCallFailed as exc:
        raise ApiError(502, str(exc), code="mcp_error", type="server_error") from None
    server, tool = split_name(name)
    return {"tool_name": name, "server": server, "tool": tool, **result.as_dict()}


def _tool_name(body: ExecuteBody) -> str:
    if body.tool_name:
        return body.tool_name
    if body.server and body.tool:
        return full_name(body.server, body.tool)
    raise ApiError(
        400,
        "tool_name: required (SERVER__TOOL, as GET /v1/mcp/tools names it), or both server and tool",
        param="tool_name",
    )


def _arguments(value) -> dict:
    if value is None:
        return {}
    if isinstance(value, str):  # OpenAI's tool calls carry arguments as JSON text
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            raise ApiError(400, f"arguments: not valid JSON ({exc})", param="arguments") from None
    if not isinstance(value, dict):
        raise ApiError(400, "arguments: must be a JSON object", param="arguments")
    return value
