"""The ``plugins`` family: ``plugin/*``, the built-in catalog, plugin skills and MCP servers.

``install`` registers ``plugin/*`` (capability ``pluginManagement``) and, in
the background, hands enabled plugins' skills to the skills family. The
MCP family (installed after this one) asks :func:`plugins_of` for the
service to read enabled plugins' bundled MCP servers. The service is
reachable as ``server.plugins``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.services.plugins.service import PluginService

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

__all__ = ["PluginService", "install", "plugins_of"]


def plugins_of(server: FamilyContext) -> PluginService | None:
    """The server's plugin service, if the family is installed."""
    service = getattr(server, "plugins", None)
    return service if isinstance(service, PluginService) else None


def install(server: FamilyContext) -> None:
    """Serve ``plugin/*`` and expose ``server.plugins``."""
    service = PluginService(server)
    service.register(server.router)
    server.start_background(service.run)
    server.plugins = service
