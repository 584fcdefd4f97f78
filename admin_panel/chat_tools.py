"""MCP tools in the Chat page: the tools offered to the model, a call the model made run on its
MCP server, and the messages that carry the call and its result back into the conversation.

The loop itself is in admin_panel/consumers/chat.py: a round of generation; if it ended in tool
calls, each call is run here and shown as a step of the answer, the assistant's calls and the
tools' results are added to the messages, and the next round generates from them; at most
``MAX_TOOL_ROUNDS`` rounds of calls per message. A call that cannot run (unknown tool, bad
arguments, server down, timeout) is not the end of the answer: its error goes back to the model
as the tool's result, as a failing tool's own error does, so the model can correct itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

MAX_TOOL_ROUNDS = 8


def offered_tools() -> Optional[List[dict]]:
    """The running MCP servers' tools in OpenAI's form; None when there are none."""
    from inference.mcp.manager import get_manager

    manager = get_manager()
    tools = [t.openai_tool() for t in manager.tools()] if manager is not None else []
    return tools or None


@dataclass
class ToolStep:
    """One call the model made and what came of it."""

    call_id: str
    name: str
    arguments: str  # the model's JSON text, as it wrote it
    result: str = ""  # the text the model gets back
    is_error: bool = False

    def tool_message(self) -> dict:
        return {"role": "tool", "tool_call_id": self.call_id, "name": self.name, "content": self.result}


def assistant_message(text: str, calls: List[dict]) -> dict:
    """The assistant's turn that made ``calls`` (the engine's {"id", "name", "arguments"})."""
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ],
    }


async def run_call(call: dict) -> ToolStep:
    """Run one call on its MCP server; every failure becomes an error result for the model."""
    from inference.mcp import connection
    from inference.mcp.manager import BadArguments, UnknownTool, get_manager
    from inference.mcp.tools import parse_arguments

    step = ToolStep(call["id"], call["name"], call.get("arguments") or "{}")
    manager = get_manager()
    try:
        if manager is None:
            raise UnknownTool("no MCP servers are running")
        result = await manager.execute(step.name, parse_arguments(step.arguments))
    except (
        UnknownTool,
        BadArguments,
        ValueError,
        connection.NotRunning,
        connection.ToolTimeout,
        connection.ToolCallFailed,
    ) as exc:
        step.result, step.is_error = f"Error: {exc}", True
        return step
    step.result, step.is_error = result.text(), result.is_error
    return step
