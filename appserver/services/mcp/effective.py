"""The effective MCP server list: workspace servers, then enabled plugins' servers.

A plugin server's runtime name is ``<pluginId>:<name>``. When that name
(case-insensitively) is already taken by a workspace server, or by a plugin
earlier in the order, the plugin server is *shadowed*: it is neither listed
nor connected, and its plugin reports ``shadowedBy``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from appserver.protocol.mcp import McpServerConfig, McpServerOrigin
from appserver.storage.mcp import server_key

ShadowedBy = Literal["workspace", "plugin"]


@dataclass(frozen=True)
class PluginServerDeclaration:
    """An MCP server an enabled plugin declares, already validated and resolved
    (``config.name`` is the runtime name)."""

    plugin_id: str
    plugin_display_name: str
    declared_name: str
    config: McpServerConfig


@dataclass
class Effective:
    """What ``mcp/list`` shows and the runtime runs, plus who shadowed whom."""

    servers: list[McpServerConfig] = field(default_factory=list)
    # (plugin id, runtime name), both lower-cased -> what shadows that declaration
    shadowed: dict[tuple[str, str], ShadowedBy] = field(default_factory=dict)

    def shadowed_by(self, plugin_id: str, runtime_name: str) -> ShadowedBy | None:
        """Why a plugin's declaration is not in the list, if it is not."""
        return self.shadowed.get((plugin_id.lower(), server_key(runtime_name)))

    def find(self, name: str) -> McpServerConfig | None:
        """The effective server called ``name`` (case-insensitively)."""
        key = server_key(name.strip())
        return next((s for s in self.servers if server_key(s.name) == key), None)


def workspace_entry(config: McpServerConfig) -> McpServerConfig:
    """A stored workspace configuration as the wire shows it."""
    return config.model_copy(
        update={"origin": McpServerOrigin(kind="workspace"), "read_only": False}
    )


def merge(
    workspace: list[McpServerConfig], declarations: list[PluginServerDeclaration]
) -> Effective:
    """Workspace servers win; among plugins, the first declaration of a name wins."""
    effective = Effective()
    taken: dict[str, ShadowedBy] = {}
    for config in workspace:
        taken[server_key(config.name)] = "workspace"
        effective.servers.append(workspace_entry(config))
    for declaration in declarations:
        key = server_key(declaration.config.name)
        if key in taken:
            effective.shadowed[(declaration.plugin_id.lower(), key)] = taken[key]
            continue
        taken[key] = "plugin"
        origin = McpServerOrigin(
            kind="plugin",
            plugin_id=declaration.plugin_id,
            plugin_display_name=declaration.plugin_display_name,
            declared_name=declaration.declared_name,
        )
        effective.servers.append(
            declaration.config.model_copy(update={"origin": origin, "read_only": True})
        )
    effective.servers.sort(key=lambda server: server_key(server.name))
    return effective
