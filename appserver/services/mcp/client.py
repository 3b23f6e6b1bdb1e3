"""The one place that uses the official ``mcp`` SDK (client side).

Everything else in the server sees :func:`open_connection`, which yields an
:class:`McpConnection` holding the server's tool list and a way to call a
tool, and two exceptions with messages fit for ``lastError`` and tool
results. Swapping the SDK (or its major version) means rewriting this file.

The SDK is imported lazily, in a worker thread, by the first connection:
importing it takes a second or more, which neither server start-up nor the
event loop should pay. Connections starting together import it under one
lock, so it is imported once, whole.

stdio servers run with the SDK's safe default environment plus the
configuration's variables; their stderr is kept (last lines) so a server
that dies on start-up explains why in ``lastError``.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.to_thread

from appserver import __version__
from appserver.services.mcp.config import LaunchSpec

if TYPE_CHECKING:
    from mcp import Client
    from mcp import types as mcp_types

log = logging.getLogger("appserver.mcp")

_MAX_PAGES = 50  # a server whose tools/list never ends must not hang start-up
_STDERR_LINES = 20
_HTTP_TIMEOUT = (30.0, 300.0)  # connect/write/pool and read: the SDK's recommended defaults
_SDK_MODULES = ("httpx2", "mcp", "mcp.client.stdio", "mcp.client.streamable_http")


_SDK_IMPORT = threading.Lock()
_SDK_LOADED = threading.Event()  # set once every module imported whole


def _import_sdk() -> None:
    """Import the SDK's modules, one thread at a time: two threads importing a
    package's modules at once can each hold a module another needs, and Python
    then fails one of them with "partially initialized module ... (most likely
    due to a circular import)" (two servers starting together did)."""
    with _SDK_IMPORT:
        for name in _SDK_MODULES:
            importlib.import_module(name)
        _SDK_LOADED.set()


async def _load_sdk() -> None:
    # Not ``name in sys.modules``: a module is there while still being imported.
    if not _SDK_LOADED.is_set():
        await anyio.to_thread.run_sync(_import_sdk)


class McpClientError(Exception):
    """Connecting or listing failed; the message is meant for ``lastError``."""


class McpCallError(Exception):
    """A tool call failed below the tool (timeout, lost connection, protocol error)."""

    def __init__(self, message: str, connection_lost: bool = False) -> None:
        super().__init__(message)
        self.connection_lost = connection_lost


@dataclass(frozen=True)
class RemoteTool:
    """A tool as the MCP server describes it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolCallResult:
    """A tool's answer, flattened to text."""

    text: str
    is_error: bool


class McpConnection:
    """An open session with one MCP server."""

    def __init__(
        self,
        client: Client,
        tools: list[RemoteTool],
        resource_count: int,
        resource_template_count: int,
    ) -> None:
        self._client = client
        self.tools = tools
        self.resource_count = resource_count
        self.resource_template_count = resource_template_count

    async def call_tool(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> ToolCallResult:
        """Call ``name``; raises :class:`McpCallError` when no answer came back."""
        from mcp import MCPError
        from mcp import types as mcp_types

        try:
            with anyio.fail_after(timeout):
                result = await self._client.call_tool(name, arguments)
        except TimeoutError:
            raise McpCallError(f"no answer within {timeout:g} s") from None
        except MCPError as exc:
            lost = exc.code == mcp_types.CONNECTION_CLOSED
            raise McpCallError(exc.message, connection_lost=lost) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise McpCallError(describe_failure(exc), connection_lost=True) from None
        except Exception as exc:  # e.g. a result that does not match the protocol
            raise McpCallError(describe_failure(exc)) from None
        return ToolCallResult(_result_text(result), bool(result.is_error))


@asynccontextmanager
async def open_connection(spec: LaunchSpec) -> AsyncIterator[McpConnection]:
    """Connect, list tools and resources within ``spec.startup_timeout``, and
    keep the session open until the context exits.

    Raises :class:`McpClientError` (never an SDK exception) when connecting
    fails or takes too long.
    """
    try:
        await _load_sdk()
    except ImportError as exc:
        raise McpClientError(f"the mcp SDK cannot be imported: {exc}") from exc
    stderr = _StderrTail() if spec.transport == "stdio" else None
    http = _HttpErrors()
    started = False
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + spec.startup_timeout) as startup:
            async with AsyncExitStack() as stack:
                try:
                    client = await _enter_client(stack, spec, stderr, http)
                    connection = await _describe(client)
                except Exception as exc:
                    failure = describe_failure(exc)
                    raise McpClientError(await _explained(failure, stderr, http)) from exc
                finally:
                    if stderr is not None:
                        stderr.release_writer()
                # Started: the start-up deadline no longer applies to this session.
                startup.deadline = math.inf
                started = True
                yield connection
        if startup.cancelled_caught and not started:
            message = f"timed out after {spec.startup_timeout:g} s while connecting"
            raise McpClientError(await _explained(message, stderr, http))
    finally:
        if stderr is not None:
            stderr.release_writer()


async def _enter_client(
    stack: AsyncExitStack, spec: LaunchSpec, stderr: _StderrTail | None, http: _HttpErrors
) -> Client:
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp import types as mcp_types
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    info = mcp_types.Implementation(name="appserver", version=__version__)
    if spec.transport == "stdio":
        assert stderr is not None
        from appserver.services.mcp import process_groups

        process_groups.install()
        await stack.enter_async_context(process_groups.ended())
        params = StdioServerParameters(
            command=spec.command, args=list(spec.args), env=spec.env, cwd=spec.cwd
        )
        transport: Any = stdio_client(params, errlog=stderr.writer)
    else:
        http_client = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=spec.headers,
                timeout=httpx2.Timeout(_HTTP_TIMEOUT[0], read=_HTTP_TIMEOUT[1]),
                event_hooks={"response": [http.record]},
            )
        )
        transport = streamable_http_client(spec.url, http_client=http_client)
    # Listings are fetched once per session, so the SDK's response cache only costs memory.
    client = Client(transport, client_info=info, cache=None)
    return await stack.enter_async_context(client)


async def _describe(client: Client) -> McpConnection:
    from mcp import MCPError

    tools: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(
            RemoteTool(
                name=tool.name,
                description=tool.description or tool.title or tool.name,
                input_schema=dict(tool.input_schema),
            )
            for tool in page.tools
        )
        cursor = page.next_cursor
        if cursor is None:
            break
    resources = templates = 0
    if client.server_capabilities.resources is not None:
        # Counts are informational (status), so a server that fails to list them still works.
        try:
            resources = len((await client.list_resources()).resources)
            templates = len((await client.list_resource_templates()).resource_templates)
        except MCPError as exc:
            log.debug("listing resources failed: %s", exc.message)
    return McpConnection(client, tools, resources, templates)


def _result_text(result: mcp_types.CallToolResult) -> str:
    from mcp import types as mcp_types

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource: {resource.uri}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def describe_failure(exc: BaseException) -> str:
    """One line about what went wrong (task-group wrappers unwrapped)."""
    mcp = sys.modules.get("mcp")  # loaded whenever an SDK error can exist
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if mcp is not None and isinstance(exc, mcp.MCPError):
        return str(exc.message)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _explained(message: str, stderr: _StderrTail | None, http: _HttpErrors) -> str:
    """``message`` plus what the server said: its stderr, or its HTTP status."""
    if stderr is not None:
        tail = await stderr.drain()
        return f"{message} (stderr: {tail})" if tail else message
    return f"{message} ({http.last})" if http.last else message


class _HttpErrors:
    """The last HTTP error status (the SDK reports only a generic message)."""

    def __init__(self) -> None:
        self.last: str | None = None

    async def record(self, response: Any) -> None:
        if response.status_code >= 400:
            self.last = f"HTTP {response.status_code} {response.reason_phrase}".strip()


class _StderrTail:
    """A pipe for a stdio server's stderr; a thread keeps its last lines.

    The SDK wants a real file for the child's stderr. The write end is ours
    until the child has it (:meth:`release_writer`); the reading thread ends
    when the child's copy closes too.
    """

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = open(write_fd, "w", encoding="utf-8")  # noqa: SIM115
        self._reader: TextIO = open(read_fd, encoding="utf-8", errors="replace")  # noqa: SIM115
        self._lines: deque[str] = deque(maxlen=_STDERR_LINES)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name="mcp-stderr", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for line in self._reader:
                text = line.rstrip()
                if text:
                    log.debug("mcp server stderr: %s", text)
                    with self._lock:
                        self._lines.append(text)
        except (OSError, ValueError):
            pass  # closed under us at shutdown
        finally:
            self._reader.close()

    async def drain(self, timeout: float = 1.0) -> str:
        """The last lines, joined, once the (dead) child's output is all read.

        Bounded: a grandchild still holding the pipe must not stall the caller.
        """
        self.release_writer()
        await anyio.to_thread.run_sync(self._thread.join, timeout)
        with self._lock:
            return " | ".join(self._lines)[-1000:]

    def release_writer(self) -> None:
        """Close our copy of the write end (the child keeps its own)."""
        if not self.writer.closed:
            self.writer.close()
