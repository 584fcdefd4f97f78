"""One MCP server, supervised: started, watched, restarted with backoff when it goes away.

States: ``starting`` (first connection), ``running`` (connected, tools listed), ``crashed`` (the
connection ended or never came up: ``last_error`` says why; waiting out the backoff),
``restarting`` (connecting again), ``stopped`` (omlx is stopping). Only a ``running`` server's
tools are offered and callable.

How a lost server is noticed: a stdio server's stdout closing (the process exited or was
killed) ends the transport's read stream, which wakes the watcher at once; an HTTP server is
probed (``tools/list``) every ``probe_seconds`` and whenever a call failed in a way that may mean
it is gone. A failure never leaves this object: the supervisor logs it, records it and
reconnects after a delay that doubles from ``BACKOFF_START`` to ``BACKOFF_MAX`` (back to the
start once a connection has stayed up for ``STABLE_SECONDS``).

Everything here runs on the manager's event loop (``inference.mcp.manager``); the SDK's
``Client`` is entered and left by the one task that runs ``run()``, as anyio requires.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import List, Optional

from .config import ServerSpec
from .tools import ToolInfo, ToolResult

logger = logging.getLogger("omlx.mcp")

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
STABLE_SECONDS = 60.0
PROBE_TIMEOUT = 10.0


class NotRunning(RuntimeError):
    """The server is not connected now (crashed, restarting, stopped)."""


class ToolTimeout(RuntimeError):
    """The call did not finish in time."""


class ToolCallFailed(RuntimeError):
    """The server answered the call with a protocol error, or the call broke off."""


class ServerConnection:
    def __init__(
        self,
        spec: ServerSpec,
        connect_timeout: float = 30.0,
        probe_seconds: float = 10.0,
        log_dir: Optional[Path] = None,
    ):
        self.spec = spec
        self.connect_timeout = connect_timeout
        self.probe_seconds = probe_seconds
        self.log_path = Path(log_dir) / f"mcp-{spec.name}.log" if log_dir is not None else None
        self.state = "starting"
        self.tools: List[ToolInfo] = []
        self.last_error: Optional[str] = None
        self.restarts = 0
        self.since = time.time()  # when the state last changed (wall clock, for people)
        self.connected = asyncio.Event()  # set while running: lets the manager wait for the first start
        self._client = None
        self._stopping = False
        self._wake = asyncio.Event()  # the stream ended, a call failed, or stop(): look now

    def snapshot(self) -> dict:
        return {
            "name": self.spec.name,
            "transport": self.spec.transport,
            "state": self.state,
            "tools": len(self.tools) if self.state == "running" else 0,
            "last_error": self.last_error,
            "restarts": self.restarts,
            "since": round(self.since, 3),
        }

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    def _set(self, state: str) -> None:
        self.state = state
        self.since = time.time()
        if state == "running":
            self.connected.set()
        else:
            self.connected.clear()

    async def run(self) -> None:
        """Connect, watch, reconnect, until ``stop()``. Never raises (but CancelledError)."""
        loop = asyncio.get_running_loop()
        delay = BACKOFF_START
        while not self._stopping:
            began = loop.time()
            try:
                await self._connect_and_watch()
                reason = None
            except Exception as exc:  # anything the SDK or the server does: recorded, then restarted
                reason = describe(exc)
            self._client = None
            if self._stopping:
                break
            self.last_error = self._with_stderr(reason or "the connection closed")
            self._set("crashed")
            self.restarts += 1
            logger.warning(
                "MCP server %s: %s; restarting in %.1f s",
                self.spec.name,
                self.last_error,
                delay,
                extra={"event": "mcp_crash"},
            )
            if loop.time() - began > STABLE_SECONDS:
                delay = BACKOFF_START
            self._wake.clear()
            try:  # the backoff, cut short by stop() (checked after the clear: no stop is missed)
                if not self._stopping:
                    await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, BACKOFF_MAX)
            if not self._stopping:
                self._set("restarting")
        self._set("stopped")

    async def _connect_and_watch(self) -> None:
        import anyio
        from mcp import Client
        from mcp.types import Implementation

        ended = asyncio.Event()
        client = Client(
            _watched(self._transport(), ended, self._wake),
            client_info=Implementation(name="omlx", version=_version()),
        )
        # One cancel scope around the whole session: its deadline bounds the start only.
        with anyio.fail_after(self.connect_timeout) as scope:
            async with client:
                tools = await _list_tools(client, self.spec.name)
                scope.deadline = math.inf
                self.tools, self._client = tools, client
                self._set("running")
                logger.info(
                    "MCP server %s running: %d tools",
                    self.spec.name,
                    len(tools),
                    extra={"event": "mcp_start"},
                )
                await self._watch(client, ended)

    async def _watch(self, client, ended: asyncio.Event) -> None:
        """Returns on stop(); raises ConnectionError when the server is gone."""
        import anyio

        while True:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.probe_seconds)
            except asyncio.TimeoutError:
                pass
            if self._stopping:
                return
            if ended.is_set():
                raise ConnectionError(
                    "the server closed the connection (its process exited)"
                    if self.spec.transport == "stdio"
                    else "the server closed the connection"
                )
            try:
                with anyio.fail_after(PROBE_TIMEOUT):
                    self.tools = await _list_tools(client, self.spec.name)
            except TimeoutError:
                raise ConnectionError(f"no answer to tools/list within {PROBE_TIMEOUT:g} s") from None

    def _transport(self):
        spec = self.spec
        if spec.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=spec.command, args=spec.args, env=spec.env or None, cwd=spec.cwd
            )
            return _stdio(stdio_client, params, self.log_path)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        return _http(streamable_http_client, create_mcp_http_client, spec.url, spec.headers)

    async def call(self, tool: str, arguments: dict, timeout: float) -> ToolResult:
        """Call ``tool`` with ``arguments``; NotRunning, ToolTimeout or ToolCallFailed otherwise."""
        import anyio
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        client = self._client
        if client is None or self.state != "running":
            raise NotRunning(
                f"the MCP server '{self.spec.name}' is {self.state}"
                + (f" ({self.last_error})" if self.last_error else "")
            )
        try:
            with anyio.fail_after(timeout):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            self._wake.set()  # a server that stopped answering is probed at once
            raise ToolTimeout(
                f"the tool '{tool}' of '{self.spec.name}' did not answer within {timeout:g} s"
            ) from None
        except MCPError as exc:
            self._wake.set()
            if exc.code == CONNECTION_CLOSED:  # the server went away under the call
                raise NotRunning(
                    f"the connection to the MCP server '{self.spec.name}' closed during the "
                    "call; it is being reconnected"
                ) from None
            raise ToolCallFailed(f"the MCP server '{self.spec.name}' answered with an error: {exc}") from None
        except Exception as exc:
            self._wake.set()
            raise ToolCallFailed(f"the call to '{self.spec.name}' failed: {describe(exc)}") from None
        content = [
            block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
        ]
        return ToolResult(content, result.structured_content, bool(result.is_error))

    def _with_stderr(self, reason: str) -> str:
        """The reason, with the last line a stdio server wrote to stderr (often the real cause)."""
        if self.log_path is None or not self.log_path.exists():
            return reason
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, 2) - 2048))
                lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
        except OSError:
            return reason
        return f"{reason}; its stderr ends with: {lines[-1].strip()[:300]}" if lines else reason


async def _list_tools(client, server: str) -> List[ToolInfo]:
    tools, cursor = [], None
    for _ in range(100):  # a server that pages forever cannot hang the start
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools += [
            ToolInfo(server, t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


@asynccontextmanager
async def _stdio(stdio_client, params, log_path: Optional[Path]):
    """The SDK's stdio transport; the server's stderr goes to its own log file (mcp-NAME.log)."""
    if log_path is None:
        async with stdio_client(params, errlog=sys.stderr) as streams:
            yield streams
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams


@asynccontextmanager
async def _http(streamable_http_client, create_client, url: str, headers: dict):
    async with create_client(headers=headers or None) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


@asynccontextmanager
async def _watched(transport, ended: asyncio.Event, wake: asyncio.Event):
    """``transport`` whose read stream sets ``ended`` (and ``wake``) when it ends: how a stdio
    server's exit is seen the moment it happens."""
    async with transport as (read_stream, write_stream):
        yield _WatchedStream(read_stream, ended, wake), write_stream


class _WatchedStream:
    """A receive stream that reports its end; everything else is the wrapped stream's."""

    def __init__(self, inner, ended: asyncio.Event, wake: asyncio.Event):
        self._inner, self._ended, self._wake = inner, ended, wake

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _end(self) -> None:
        self._ended.set()
        self._wake.set()

    async def receive(self):
        try:
            return await self._inner.receive()
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                self._end()
            raise

    def __aiter__(self):
        return self

    async def __anext__(self):
        import anyio

        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self):
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self._inner.__aexit__(*exc)


def describe(exc: BaseException) -> str:
    """One line for a failure: the first real error inside anyio's exception groups."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # (Base)ExceptionGroup
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time (connecting or listing tools)"
    if isinstance(exc, FileNotFoundError):
        return f"cannot start the command: {exc.strerror}: {exc.filename}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version() -> str:
    from inference.version import version

    return version()
