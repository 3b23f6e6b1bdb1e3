"""The ``mcp`` family: MCP server configuration, live connections, agent tools.

``install`` registers ``mcp/*`` (capabilities ``mcpManagement`` and
``mcpStatus``), turns on the ``mcpServerOrigins`` feature flag, starts the
runtime in the background (never delaying start-up or ``/readyz``), closes
the sessions at shutdown and links up with the plugins family so enabled
plugins' bundled servers join the effective list. The service is reachable
as ``server.mcp`` through :func:`mcp_of`.

The ``mcp`` SDK is used only in :mod:`appserver.services.mcp.client`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.services.mcp.service import McpService

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

__all__ = ["McpService", "install", "mcp_of"]


def mcp_of(server: FamilyContext) -> McpService | None:
    """The server's MCP service, if the family is installed."""
    service = getattr(server, "mcp", None)
    return service if isinstance(service, McpService) else None


def install(server: FamilyContext) -> None:
    """Serve ``mcp/*``, run the MCP runtime, expose ``server.mcp``."""
    service = McpService(server)
    service.register(server.router)
    server.router.enable_feature("mcpServerOrigins")
    server.start_background(service.run)
    server.shutdown_hooks.append(service.close)
    plugins = server.plugins  # installed before this family
    if plugins is not None:
        service.plugin_declarations = plugins.mcp_declarations
        plugins.mcp_workspace_servers = service.workspace_servers
        plugins.mcp_refresh = service.refresh
    server.mcp = service
