"""MCP tools as the rest of omlx sees them: plain data, named ``server__tool``.

A tool's public name joins its server's name and its own with a double underscore (upstream
oMLX's convention); server names never hold one (``inference.mcp.config``), so the first ``__``
splits a name back. Tools are offered to models in OpenAI's form (``openai_tool``) and their
results go back to the model as the text of a ``tool`` message (``ToolResult.text``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

SEPARATOR = "__"


def full_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def split_name(name: str) -> Tuple[str, str]:
    """(server, tool) of a public name; ValueError when it has no server part."""
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not server or not tool:
        raise ValueError(f"{name!r} is not a tool name of the form SERVER{SEPARATOR}TOOL")
    return server, tool


@dataclass(frozen=True)
class ToolInfo:
    """A tool as its server listed it."""

    server: str
    name: str
    description: str
    input_schema: dict

    @property
    def full_name(self) -> str:
        return full_name(self.server, self.name)

    def openai_tool(self) -> dict:
        """OpenAI's function-tool form, as /v1/chat/completions takes it in ``tools``."""
        schema = (
            self.input_schema
            if isinstance(self.input_schema, dict) and self.input_schema
            else {"type": "object", "properties": {}}
        )
        return {
            "type": "function",
            "function": {"name": self.full_name, "description": self.description, "parameters": schema},
        }


@dataclass
class ToolResult:
    """What a tool call gave: MCP content blocks (wire form: {"type": "text", "text"}, images,
    resources), the structured value if the tool has an output schema, and whether the tool
    reported an error (a result the model should see, not a failure of the call)."""

    content: List[dict] = field(default_factory=list)
    structured: Any = None
    is_error: bool = False

    def text(self) -> str:
        """The result as the text of a ``tool`` message: the text blocks joined; other blocks
        described; the structured value as JSON when there is no text."""
        parts = []
        for block in self.content:
            kind = block.get("type")
            if kind == "text":
                parts.append(block.get("text", ""))
            elif (
                kind == "resource" and isinstance(block.get("resource"), dict) and "text" in block["resource"]
            ):
                parts.append(block["resource"]["text"])
            else:
                parts.append(f"[{kind} content: {block.get('mimeType') or block.get('uri') or 'binary'}]")
        if not any(p.strip() for p in parts) and self.structured is not None:
            parts = [json.dumps(self.structured, ensure_ascii=False)]
        return "\n".join(parts)

    def as_dict(self) -> dict:
        return {
            "content": self.content,
            "structured_content": self.structured,
            "is_error": self.is_error,
            "text": self.text(),
        }


def parse_arguments(arguments: Optional[str]) -> dict:
    """A model's call arguments (JSON text) as an object; ValueError when they are not one."""
    if arguments is None or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise ValueError(f"the arguments are not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value
