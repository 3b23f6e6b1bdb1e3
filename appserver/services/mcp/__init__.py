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
    from appserver.server import AppServer

__all__ = ["McpService", "install", "mcp_of"]


def mcp_of(server: AppServer) -> McpService | None:
    """The server's MCP service, if the family is installed."""
    service = getattr(server, "mcp", None)
    return service if isinstance(service, McpService) else None


def install(server: AppServer) -> None:
    """Serve ``mcp/*``, run the MCP runtime, expose ``server.mcp``."""
    # Imported here: the plugins family imports this package's modules.
    from appserver.services.plugins import plugins_of

    service = McpService(server)
    service.register(server.router)
    server.router.enable_feature("mcpServerOrigins")
    server.start_background(service.run)
    server.shutdown_hooks.append(service.close)
    plugins = plugins_of(server)
    if plugins is not None:
        service.plugin_declarations = plugins.mcp_declarations
        plugins.mcp_workspace_servers = service.workspace_servers
        plugins.mcp_refresh = service.refresh
    # AppServer has no declared slot for optional families; mcp_of() is the typed way in.
    setattr(server, "mcp", service)  # noqa: B010
