"""Every configured MCP server, on an event loop of its own thread, for the life of the server.

`omlx serve` starts the process-wide manager (``start``) before it listens and stops it
(``stop``) after the last request: the servers start with omlx and stop with it. The API's
routes and the console's chat ask it from their own event loops or threads: ``execute`` and
``execute_sync`` hand the call to the manager's loop and wait for it there. Nothing a server does
(crash, hang, garbage) reaches omlx but as a state and an error message
(``inference.mcp.connection``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .config import ServerSpec
from .connection import ServerConnection
from .tools import ToolInfo, ToolResult, split_name

logger = logging.getLogger("omlx.mcp")

DEFAULT_TOOL_TIMEOUT = 60.0


class UnknownTool(LookupError):
    """No running server offers this tool (or no such server)."""


class BadArguments(ValueError):
    """The arguments do not fit the tool's input schema."""


class MCPManager:
    def __init__(
        self,
        specs: List[ServerSpec],
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        log_dir: Optional[Path] = None,
        connect_timeout: float = 30.0,
        probe_seconds: float = 10.0,
    ):
        self.tool_timeout = tool_timeout
        self._specs = specs
        self._options = {
            "log_dir": log_dir,
            "connect_timeout": connect_timeout,
            "probe_seconds": probe_seconds,
        }
        self.connections: Dict[str, ServerConnection] = {}
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._tasks: List[asyncio.Task] = []

    def start(self) -> "MCPManager":
        ready = threading.Event()

        def main():
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            for spec in self._specs:  # the connections' asyncio objects belong to this loop
                self.connections[spec.name] = ServerConnection(spec, **self._options)
            self._tasks = [loop.create_task(c.run(), name=f"mcp-{n}") for n, c in self.connections.items()]
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name="omlx-mcp", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def wait_started(self, timeout: float) -> bool:
        """Wait until every server has been up once or failed once; True when all are running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [c.state for c in list(self.connections.values())]
            if all(s != "starting" for s in states):
                break
            time.sleep(0.05)
        return all(c.state == "running" for c in self.connections.values())

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every server (a stdio server's process ends) and the loop's thread."""
        loop = self.loop
        if loop is None or self._thread is None:
            return

        async def close():
            for connection in self.connections.values():
                connection.stop()
            done, pending = (
                await asyncio.wait(self._tasks, timeout=timeout) if self._tasks else (set(), set())
            )
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)

        try:
            asyncio.run_coroutine_threadsafe(close(), loop).result(timeout + 5.0)
        except Exception:
            logger.exception("stopping the MCP servers failed")
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=5.0)
        self._thread = None

    # -- what is there

    def servers(self) -> List[dict]:
        return [c.snapshot() for c in self.connections.values()]

    def tools(self) -> List[ToolInfo]:
        """The tools of the running servers, server by server in the file's order."""
        return [t for c in self.connections.values() if c.state == "running" for t in c.tools]

    def find(self, name: str) -> Tuple[ServerConnection, ToolInfo]:
        """The connection and tool behind a public name (``server__tool``); UnknownTool if none."""
        try:
            server, tool = split_name(name)
        except ValueError as exc:
            raise UnknownTool(str(exc)) from None
        connection = self.connections.get(server)
        if connection is None:
            raise UnknownTool(
                f"there is no MCP server named '{server}' (configured: "
                f"{', '.join(self.connections) or 'none'})"
            )
        for info in connection.tools:
            if info.name == tool:
                return connection, info
        if connection.state != "running":
            return connection, ToolInfo(server, tool, "", {})  # the call says it is not running
        raise UnknownTool(f"the MCP server '{server}' has no tool named '{tool}'")

    # -- calls

    async def execute(self, name: str, arguments: dict, timeout: Optional[float] = None) -> ToolResult:
        """Run a tool from any event loop. UnknownTool, BadArguments, or the connection's
        NotRunning / ToolTimeout / ToolCallFailed."""
        connection, info = self.find(name)
        check_arguments(info, arguments)
        future = asyncio.run_coroutine_threadsafe(
            connection.call(info.name, arguments, timeout or self.tool_timeout), self.loop
        )
        return await asyncio.wrap_future(future)

    def execute_sync(self, name: str, arguments: dict, timeout: Optional[float] = None) -> ToolResult:
        connection, info = self.find(name)
        check_arguments(info, arguments)
        future = asyncio.run_coroutine_threadsafe(
            connection.call(info.name, arguments, timeout or self.tool_timeout), self.loop
        )
        return future.result()


def check_arguments(info: ToolInfo, arguments) -> None:
    """BadArguments when ``arguments`` is not an object or breaks the tool's input schema (a
    schema that is itself broken is left to the server)."""
    if not isinstance(arguments, dict):
        raise BadArguments(f"the arguments of '{info.full_name}' must be a JSON object")
    if not info.input_schema:
        return
    import jsonschema

    try:
        validator = jsonschema.validators.validator_for(info.input_schema)(info.input_schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise BadArguments(
            f"the arguments of '{info.full_name}' do not fit its input schema"
            f"{' at ' + where if where else ''}: {error.message}"
        )


_manager: Optional[MCPManager] = None
_lock = threading.Lock()


def get_manager() -> Optional[MCPManager]:
    """The running manager; None when no MCP servers are configured (or omlx is not serving)."""
    return _manager


def start(specs: List[ServerSpec], **options) -> MCPManager:
    """Start the process-wide manager (``omlx serve``; tests)."""
    global _manager
    with _lock:
        if _manager is not None:
            raise RuntimeError("the MCP servers are running already")
        _manager = MCPManager(specs, **options).start()
        return _manager


def stop() -> None:
    global _manager
    with _lock:
        manager, _manager = _manager, None
    if manager is not None:
        manager.stop()
