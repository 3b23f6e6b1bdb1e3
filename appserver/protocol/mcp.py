"""Wire models and method-table entries of the `mcp` family (reference §3.9, §4).

``mcpManagement`` gates ``mcp/list|get|upsert|remove``; ``mcpStatus`` gates
``mcp/status/list`` and ``mcp/test`` (and the ``mcp/status/updated``
notification); ``mcpServerOrigins`` (a feature flag) says configurations and
statuses carry ``origin`` and ``readOnly``.
"""

from typing import Any, Literal

from pydantic import ConfigDict, field_validator, model_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty, Flag, WireModel
from appserver.protocol.limits import MAX_SERVER_CONFIG_BYTES, check_encoded_size
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

McpTransport = Literal["stdio", "streamableHttp"]
StartupState = Literal["idle", "starting", "ready", "error", "disabled"]

_HTTP_SPELLINGS = frozenset({"streamablehttp", "streamable-http", "streamable_http", "http"})


class McpServerOrigin(WireModel):
    """Where an effective server comes from: the workspace, or an enabled plugin."""

    kind: Literal["workspace", "plugin"]
    """`workspace` or `plugin`."""
    plugin_id: str | None = None
    """The plugin that declares it."""
    plugin_display_name: str | None = None
    """That plugin's display name."""
    declared_name: str | None = None  # the name inside the plugin's .mcp.json
    """The name in the plugin's manifest (the runtime name is prefixed)."""


class McpServerConfig(WireModel):
    """One MCP server, as configured (``origin``/``readOnly`` are output only)."""

    name: str
    """The server's name; its tools are named after it."""
    enabled: Flag = True
    """Whether the server is started."""
    transport: McpTransport = "stdio"
    """`stdio` (start `command`) or `streamableHttp` (connect to `url`)."""
    command: str | None = None
    """Program to start (`stdio`)."""
    args: list[str] | None = None
    """Arguments of `command`."""
    env: dict[str, str] | None = None
    """Extra environment variables of the started program."""
    env_vars: list[str] | None = None  # variables passed through from the server's environment
    """Names of the server's environment variables passed through to the program."""
    cwd: str | None = None
    """Working directory of the started program."""
    url: str | None = None
    """Endpoint (`streamableHttp`)."""
    bearer_token_env_var: str | None = None
    """Environment variable holding a bearer token for `url`."""
    http_headers: dict[str, str] | None = None
    """HTTP headers sent to `url`."""
    env_http_headers: dict[str, str] | None = None  # header -> name of the variable holding it
    """HTTP headers whose values are read from environment variables (header: variable)."""
    startup_timeout_sec: float | None = None
    """Seconds to wait for the server to start."""
    tool_timeout_sec: float | None = None
    """Seconds a tool call may take."""
    origin: McpServerOrigin | None = None
    """Where the server comes from (output only)."""
    read_only: Flag | None = None
    """The server comes from a plugin and cannot be edited here (output only)."""

    @model_validator(mode="before")
    @classmethod
    def _infer_transport(cls, data: Any) -> Any:
        # Without a transport, a configuration with only a URL is meant for HTTP.
        if (
            isinstance(data, dict)
            and data.get("transport") is None
            and data.get("url")
            and not data.get("command")
        ):
            return {**data, "transport": "streamableHttp"}
        return data

    @field_validator("transport", mode="before")
    @classmethod
    def _transport(cls, value: Any) -> str:
        # DotCraft accepts a few spellings of streamable HTTP; anything else is stdio.
        if isinstance(value, str) and value.strip().lower() in _HTTP_SPELLINGS:
            return "streamableHttp"
        return "stdio"


class McpServerStatus(WireModel):
    """A server's runtime state (``mcp/status/list``, ``mcp/status/updated``)."""

    name: str
    """The server's name."""
    enabled: Flag
    """Whether the server is enabled."""
    startup_state: StartupState
    """Where the server is in its start-up."""
    tool_count: int = 0
    """Tools the server offers."""
    resource_count: int = 0
    """Resources the server offers."""
    resource_template_count: int = 0
    """Resource templates the server offers."""
    last_error: str | None = None
    """Why the server last failed."""
    transport: McpTransport
    """`stdio` or `streamableHttp`."""
    origin: McpServerOrigin | None = None
    """Where the server comes from."""
    read_only: Flag | None = None
    """The server comes from a plugin and cannot be edited here."""


class McpNameParams(WireModel):
    """``{name}`` of mcp/get and mcp/remove."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "docs"}]})

    name: str
    """The MCP server's name."""

    @field_validator("name")
    @classmethod
    def _non_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("must not be empty")
        return name.strip()


class McpServerParams(WireModel):
    """``{server}`` of mcp/upsert and mcp/test."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "server": {
                        "name": "docs",
                        "enabled": False,
                        "transport": "streamableHttp",
                        "url": "https://mcp.example.com/mcp",
                        "bearerTokenEnvVar": "DOCS_MCP_TOKEN",
                    }
                }
            ]
        }
    )

    server: McpServerConfig
    """The server's configuration."""

    @field_validator("server")
    @classmethod
    def _bounded(cls, server: McpServerConfig) -> McpServerConfig:
        # What mcp/upsert stores (checked here, not on the model: stored and
        # plugin-declared servers are read through it).
        check_encoded_size(server, MAX_SERVER_CONFIG_BYTES)
        return server


class McpListResult(WireModel):
    servers: list[McpServerConfig]
    """The configured MCP servers (workspace and enabled plugins)."""


class McpServerResult(WireModel):
    server: McpServerConfig
    """The server's configuration as stored."""


class McpRemoveResult(WireModel):
    removed: Flag
    """Whether the server existed and was removed."""


class McpStatusListResult(WireModel):
    servers: list[McpServerStatus]
    """Runtime state of every server."""


class McpTestResult(WireModel):
    """A probe's outcome; failures are results, not JSON-RPC errors (as in DotCraft)."""

    success: Flag
    """Whether the server started and listed its tools."""
    tool_count: int | None = None
    """Tools it listed."""
    error_code: str | None = None
    """Machine-readable reason the probe failed."""
    error_message: str | None = None
    """Human-readable reason the probe failed."""


class McpStatusUpdatedNotification(WireModel):
    server: McpServerStatus
    """The server's new state."""


_NOT_FOUND = (rpc_errors.MCP_SERVER_NOT_FOUND, rpc_errors.INVALID_PARAMS)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "mcp/list",
        Empty,
        McpListResult,
        "mcpManagement",
        "The effective MCP servers: workspace servers plus active plugin servers, by name.",
        access="read",
    ),
    MethodSpec(
        "mcp/get",
        McpNameParams,
        McpServerResult,
        "mcpManagement",
        "One effective MCP server by name (case-insensitive).",
        _NOT_FOUND,
        access="read",
    ),
    MethodSpec(
        "mcp/upsert",
        McpServerParams,
        McpServerResult,
        "mcpManagement",
        "Create or fully replace a workspace MCP server and reconnect it; emits "
        "`workspace/configChanged` and `mcp/status/updated`.",
        (
            rpc_errors.MCP_SERVER_VALIDATION_FAILED,
            rpc_errors.MCP_SERVER_READ_ONLY,
            rpc_errors.INVALID_PARAMS,
        ),
    ),
    MethodSpec(
        "mcp/remove",
        McpNameParams,
        McpRemoveResult,
        "mcpManagement",
        "Delete a workspace MCP server and disconnect it; emits `workspace/configChanged`.",
        (*_NOT_FOUND, rpc_errors.MCP_SERVER_READ_ONLY),
    ),
    MethodSpec(
        "mcp/status/list",
        Empty,
        McpStatusListResult,
        "mcpStatus",
        "Runtime status of every effective MCP server.",
        access="read",
    ),
    MethodSpec(
        "mcp/test",
        McpServerParams,
        McpTestResult,
        "mcpStatus",
        "Connect to a configuration once, list its tools within the startup timeout "
        "(default 5 s) and disconnect; nothing is stored.",
        (rpc_errors.MCP_SERVER_VALIDATION_FAILED, rpc_errors.INVALID_PARAMS),
        access="detached",
    ),
]

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "mcp/status/updated",
        McpStatusUpdatedNotification,
        "all connections",
        "An MCP server's runtime status changed (starting, ready, error, disabled).",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
