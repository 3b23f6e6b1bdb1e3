"""MCP tools as agent tools: ``mcp__<server>__<tool>``.

Calls run **without an approval request**: like DotCraft (and Codex), the
user approves an MCP server by configuring it, not each call. The engine's
approval kinds (``shell``, ``file``) describe local effects the server can
check; what an MCP tool does is opaque to us. A call becomes the usual
``toolCall``/``toolResult`` items.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from appserver.services.mcp.client import McpCallError, McpConnection, RemoteTool
from appserver.tools.base import ToolContext, ToolOutcome, ToolPlan

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # what both the OpenAI and the Anthropic APIs accept


def agent_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>`` reduced to ``[A-Za-z0-9_-]{1,64}``.

    Other characters become ``_``; a name that would be too long keeps its
    start and ends with a short hash of the original pair, so it stays unique.
    """
    name = f"mcp__{_NOT_ALLOWED.sub('_', server)}__{_NOT_ALLOWED.sub('_', tool)}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - len(digest) - 1]}_{digest}"


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    # Model APIs insist on an object schema at the top; MCP promises one, but be lenient.
    if schema.get("type") == "object":
        return schema
    return {"properties": {}, **schema, "type": "object"}


class McpTool:
    """One tool of a ready MCP server, offered to the model."""

    def __init__(
        self,
        server: str,
        remote: RemoteTool,
        connection: McpConnection,
        timeout: float,
        on_connection_lost: Callable[[str], None],
    ) -> None:
        self.server = server
        self.remote = remote
        self.name = agent_tool_name(server, remote.name)
        self.description = f"{remote.description} (MCP server '{server}', tool '{remote.name}')"
        self.input_schema = _object_schema(remote.input_schema)
        self._connection = connection
        self._timeout = timeout
        self._on_connection_lost = on_connection_lost

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """No approval (see the module docstring); the server validates arguments."""
        return ToolPlan(tool=self.name, arguments=arguments)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Call the remote tool; ``isError`` results and failures are unsuccessful outcomes."""
        details = {"mcp_server": self.server, "mcp_tool": self.remote.name}
        try:
            result = await self._connection.call_tool(
                self.remote.name, plan.arguments, self._timeout
            )
        except McpCallError as exc:
            if exc.connection_lost:
                self._on_connection_lost(str(exc))
            return ToolOutcome(False, f"Error: MCP server '{self.server}': {exc}", details)
        if result.is_error:
            text = result.text or "the tool reported an error"
            return ToolOutcome(
                False, text if text.startswith("Error") else f"Error: {text}", details
            )
        return ToolOutcome(True, result.text, details)
