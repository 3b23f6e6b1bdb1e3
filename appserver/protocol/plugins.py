"""Wire models and method-table entries of the `plugins` family (reference §3.8)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from appserver.protocol import errors as E
from appserver.protocol.base import WireModel
from appserver.protocol.limits import Name
from appserver.protocol.mcp import McpTransport
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

Severity = Literal["error", "warning", "info"]


class PluginDiagnostic(WireModel):
    """A problem found while discovering or loading plugins (never fatal)."""

    severity: Severity
    code: str  # e.g. InvalidPluginManifestJson, InvalidPluginId, DuplicatePluginId
    message: str
    plugin_id: str | None = None
    path: str | None = None


class PluginInterface(WireModel):
    """Presentation metadata from the manifest's ``interface`` block."""

    display_name: str | None = None
    short_description: str | None = None
    long_description: str | None = None
    developer_name: str | None = None
    category: str | None = None
    capabilities: list[str] = Field(default_factory=list)
    default_prompt: str | None = None
    brand_color: str | None = None
    composer_icon_data_url: str | None = None
    logo_data_url: str | None = None
    website_url: str | None = None
    privacy_policy_url: str | None = None
    terms_of_service_url: str | None = None


class PluginSkill(WireModel):
    """A skill a plugin contributes."""

    name: str
    description: str
    display_name: str | None = None
    short_description: str | None = None
    enabled: bool


class PluginMcpServer(WireModel):
    """An MCP server a plugin declares; ``active`` when it is in the runtime list."""

    name: str  # as declared in the plugin's .mcp.json
    runtime_name: str  # "<pluginId>:<name>"
    transport: McpTransport
    enabled: bool
    active: bool
    shadowed_by: Literal["workspace", "plugin"] | None = None


class PluginInfo(WireModel):
    """One plugin: installed in the workspace, or installable from the built-in catalog."""

    id: str
    display_name: str
    description: str
    version: str | None = None
    enabled: bool
    installed: bool
    installable: bool
    removable: bool
    source: Literal["workspace", "builtin"]
    root_path: str
    interface: PluginInterface | None = None
    functions: list[Any] = Field(default_factory=list)  # manifest native tools: unsupported
    skills: list[PluginSkill] = Field(default_factory=list)
    mcp_servers: list[PluginMcpServer] = Field(default_factory=list)
    diagnostics: list[PluginDiagnostic] = Field(default_factory=list)


class PluginListParams(WireModel):
    include_disabled: bool = True


class PluginListResult(WireModel):
    plugins: list[PluginInfo]  # sorted by display name
    diagnostics: list[PluginDiagnostic]


class PluginIdParams(WireModel):
    """``{id}`` of plugin/view, install and remove."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "workspace-tools"}]})

    id: Name

    @field_validator("id")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


class PluginSetEnabledParams(PluginIdParams):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "workspace-tools", "enabled": False}]}
    )

    enabled: bool


class PluginRemoveParams(PluginIdParams):
    # The example removes a catalog entry that is not installed: it answers the entry unchanged.
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "plugin-authoring"}]})


class PluginResult(WireModel):
    plugin: PluginInfo


class PluginRemoveResult(WireModel):
    """``plugin`` is what remains visible after removal (the catalog entry), if anything."""

    plugin: PluginInfo | None = None


_ERRORS = (E.INVALID_PARAMS,)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "plugin/list",
        PluginListParams,
        PluginListResult,
        "pluginManagement",
        "Installed plugins and the installable built-in catalog, by display name, with "
        "discovery diagnostics.",
        _ERRORS,
        access="read",
    ),
    MethodSpec(
        "plugin/view",
        PluginIdParams,
        PluginResult,
        "pluginManagement",
        "One plugin by id (case-insensitive).",
        _ERRORS,
        access="read",
    ),
    MethodSpec(
        "plugin/install",
        PluginIdParams,
        PluginResult,
        "pluginManagement",
        "Copy a built-in catalog plugin into `.craft/plugins/<id>` (marked `.builtin`) and "
        "enable it; emits `workspace/configChanged` (plugins, skills, mcp).",
        _ERRORS,
    ),
    MethodSpec(
        "plugin/remove",
        PluginRemoveParams,
        PluginRemoveResult,
        "pluginManagement",
        "Delete a server-managed (`.builtin`) plugin directory; user-owned plugins cannot be "
        "removed. Emits `workspace/configChanged` (plugins, skills, mcp).",
        _ERRORS,
    ),
    MethodSpec(
        "plugin/setEnabled",
        PluginSetEnabledParams,
        PluginResult,
        "pluginManagement",
        "Switch an installed plugin on or off; emits `workspace/configChanged` "
        "(plugins, skills, mcp) when that changed anything.",
        _ERRORS,
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
