"""The MCP servers file (``omlx serve --mcp-config FILE``): the ``mcpServers`` JSON of Claude
Desktop, Claude Code and upstream oMLX.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"KEY": "value"}, "cwd": "/tmp"},
        "web":   {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A server with ``command`` runs as a child process spoken to over stdin/stdout (``stdio``); one
with ``url`` is a streamable-HTTP endpoint (``http``). ``type`` may say which ("stdio", "http",
"streamable-http", "streamableHttp"); "sse" (the transport MCP deprecated) is refused with a
message. ``"disabled": true`` leaves a server out. VS Code's top-level ``servers`` key is read too.

Names become the prefix of tool names (``name__tool``, ``inference.mcp.tools``), so a name is
letters, digits, ``-`` and single ``_``. Every problem is a ValueError that names the place
(``mcpServers.web.url: ...``): the setting's check shows it when omlx starts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server as configured. ``transport`` is "stdio" (command, args, env, cwd) or
    "http" (url, headers)."""

    name: str
    transport: str
    command: Optional[str] = None
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    cwd: Optional[str] = None
    url: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)


def load(path: Path) -> List[ServerSpec]:
    """The enabled servers of the file at ``path``; ValueError when it is missing or wrong."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    try:
        return parse(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def parse(data) -> List[ServerSpec]:
    """The enabled servers of a parsed file."""
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object with an 'mcpServers' object")
    key = "mcpServers" if "mcpServers" in data else "servers" if "servers" in data else None
    if key is None:
        raise ValueError("no 'mcpServers' object (the format of Claude Desktop's configuration)")
    servers = data[key]
    if not isinstance(servers, dict):
        raise ValueError(f"{key}: must be an object of servers by name")
    specs = []
    for name, entry in servers.items():
        where = f"{key}.{name}"
        if not NAME.match(name):
            raise ValueError(
                f"{where}: a server name is letters, digits, '-' and single '_' (it prefixes "
                "its tools' names as NAME__TOOL)"
            )
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object")
        if entry.get("disabled") is True:
            continue
        specs.append(_server(name, entry, where))
    return specs


def _server(name: str, entry: dict, where: str) -> ServerSpec:
    kind = entry.get("type", entry.get("transport"))
    if kind == "sse":
        raise ValueError(
            f"{where}.type: the SSE transport is not supported (MCP replaced it with "
            "streamable HTTP); give the server's streamable-HTTP url"
        )
    if kind is not None and kind != "stdio" and kind not in HTTP_TYPES:
        raise ValueError(f"{where}.type: {kind!r} is not 'stdio' or 'http'")
    if kind == "stdio" or (kind is None and "command" in entry):
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"{where}.command: must be a non-empty string")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError(f"{where}.cwd: must be a string")
        return ServerSpec(
            name,
            "stdio",
            command=command,
            args=_strings(entry.get("args", []), f"{where}.args"),
            env=_mapping(entry.get("env", {}), f"{where}.env"),
            cwd=cwd,
        )
    url = entry.get("url")
    if url is None:
        raise ValueError(f"{where}: needs 'command' (a stdio server) or 'url' (a streamable-HTTP server)")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}.url: must be an http:// or https:// URL")
    return ServerSpec(name, "http", url=url, headers=_mapping(entry.get("headers", {}), f"{where}.headers"))


def _strings(value, where: str) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: must be a list of strings")
    return list(value)


def _mapping(value, where: str) -> Dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{where}: must be an object of strings")
    return dict(value)
