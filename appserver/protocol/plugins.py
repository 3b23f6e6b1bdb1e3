"""Wire models and method-table entries of the `plugins` family (reference §3.8)."""

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, Name, WireModel
from appserver.protocol.mcp import McpTransport
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

Severity = Literal["error", "warning", "info"]


class PluginDiagnostic(WireModel):
    """A problem found while discovering or loading plugins (never fatal)."""

    severity: Severity
    """`warning` or `error`."""
    code: str  # e.g. InvalidPluginManifestJson, InvalidPluginId, DuplicatePluginId
    """Machine-readable kind of problem."""
    message: str
    """What is wrong."""
    plugin_id: str | None = None
    """The plugin concerned, if known."""
    path: str | None = None
    """The file concerned, if any."""


class PluginInterface(WireModel):
    """Presentation metadata from the manifest's ``interface`` block."""

    display_name: str | None = None
    """Name to show."""
    short_description: str | None = None
    """One-line description."""
    long_description: str | None = None
    """Full description."""
    developer_name: str | None = None
    """Who made it."""
    category: str | None = None
    """Category for grouping in a UI."""
    capabilities: list[str] = Field(default_factory=list)
    """What it offers, as short labels."""
    default_prompt: str | None = None
    """A prompt that shows it off."""
    brand_color: str | None = None
    """CSS colour."""
    composer_icon_data_url: str | None = None
    """Small icon as a `data:` URL."""
    logo_data_url: str | None = None
    """Logo as a `data:` URL (at most 512 KB)."""
    website_url: str | None = None
    """Home page."""
    privacy_policy_url: str | None = None
    """Privacy policy."""
    terms_of_service_url: str | None = None
    """Terms of service."""


class PluginSkill(WireModel):
    """A skill a plugin contributes."""

    name: str
    """The skill's name."""
    description: str
    """What the skill does."""
    display_name: str | None = None
    """Name to show."""
    short_description: str | None = None
    """One-line description."""
    enabled: Flag
    """Whether the skill is enabled."""


class PluginMcpServer(WireModel):
    """An MCP server a plugin declares; ``active`` when it is in the runtime list."""

    name: str  # as declared in the plugin's .mcp.json
    """The name in the plugin's manifest."""
    runtime_name: str  # "<pluginId>:<name>"
    """The name it runs under: `<pluginId>:<name>`."""
    transport: McpTransport
    """`stdio` or `streamableHttp`."""
    enabled: Flag
    """Whether it is enabled."""
    active: Flag
    """Whether it is in the runtime server list."""
    shadowed_by: Literal["workspace", "plugin"] | None = None
    """What hides it: `workspace` or `plugin` (a server of the same name)."""


class PluginInfo(WireModel):
    """One plugin: installed in the workspace, or installable from the built-in catalog."""

    id: str
    """The plugin's id."""
    display_name: str
    """Name to show."""
    description: str
    """What the plugin does."""
    version: str | None = None
    """The plugin's version, from its manifest."""
    enabled: Flag
    """Whether the plugin is enabled."""
    installed: Flag
    """Whether the plugin is in the workspace."""
    installable: Flag
    """Whether `plugin/install` can install it (a built-in catalog entry not yet installed)."""
    removable: Flag
    """Whether `plugin/remove` can remove it."""
    source: Literal["workspace", "builtin"]
    """Where it was found: `workspace` or `builtin`."""
    root_path: str
    """Absolute path of the plugin's directory."""
    interface: PluginInterface | None = None
    """Presentation metadata from the manifest."""
    functions: list[Any] = Field(default_factory=list)  # manifest native tools: unsupported
    """Functions the plugin contributes."""
    skills: list[PluginSkill] = Field(default_factory=list)
    """Skills the plugin contributes."""
    mcp_servers: list[PluginMcpServer] = Field(default_factory=list)
    """MCP servers the plugin declares."""
    diagnostics: list[PluginDiagnostic] = Field(default_factory=list)
    """Problems found while loading it."""


class PluginListParams(WireModel):
    include_disabled: Flag = True
    """Include disabled plugins."""


class PluginListResult(WireModel):
    plugins: list[PluginInfo]  # sorted by display name
    """Installed and installable plugins."""
    diagnostics: list[PluginDiagnostic]
    """Problems found while discovering plugins."""


class PluginIdParams(WireModel):
    """``{id}`` of plugin/view, install and remove."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "workspace-tools"}]})

    id: Name
    """The plugin's id."""

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

    enabled: Flag
    """`true` to enable, `false` to disable."""


class PluginRemoveParams(PluginIdParams):
    # The example removes a catalog entry that is not installed: it answers the entry unchanged.
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "plugin-authoring"}]})


class PluginResult(WireModel):
    plugin: PluginInfo
    """The plugin after the change."""


class PluginRemoveResult(WireModel):
    """``plugin`` is what remains visible after removal (the catalog entry), if anything."""

    plugin: PluginInfo | None = None
    """What remains visible after removal (the catalog entry), if anything."""


_ERRORS = (rpc_errors.INVALID_PARAMS,)

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
