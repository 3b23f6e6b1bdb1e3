"""The families others reach through the :class:`~appserver.services.context.FamilyContext`
(skills, plugins, MCP, commands), typed by what is used of them there.

The context holds them by these protocols, so it imports none of the families it
is given, and the families, which import the context, form no circle with it.
Code that needs a family's whole service asks its ``<family>_of(context)``
(``skills_of``, ``plugins_of``, ``mcp_of``, ``commands_of``), which narrows to the class.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from appserver.protocol.mcp import McpServerConfig
from appserver.services.mcp.effective import PluginServerDeclaration
from appserver.services.router import Router


class SharedFamily(Protocol):
    """An installed family's service: it serves its methods on the router."""

    def register(self, router: Router) -> None: ...


class PluginsFamily(SharedFamily, Protocol):
    """The plugins family, as the MCP family links up with it at install."""

    # Set by the MCP family: the workspace's own servers, and a refresh after a change.
    mcp_workspace_servers: Callable[[], Awaitable[list[McpServerConfig]]] | None
    mcp_refresh: Callable[[], Awaitable[object]] | None

    async def mcp_declarations(self) -> list[PluginServerDeclaration]:
        """The MCP servers enabled plugins bundle."""
        ...
