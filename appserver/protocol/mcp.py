"""Wire models and method-table entries of the `mcp` family (reference §3.9, §4).

``mcpManagement`` gates ``mcp/list|get|upsert|remove``; ``mcpStatus`` gates
``mcp/status/list`` and ``mcp/test`` (and the ``mcp/status/updated``
notification); ``mcpServerOrigins`` (a feature flag) says configurations and
statuses carry ``origin`` and ``readOnly``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, field_validator, model_validator

from appserver.protocol import errors as E
from appserver.protocol.base import Empty, WireModel
from appserver.protocol.limits import MAX_SERVER_CONFIG_BYTES, check_encoded_size
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

McpTransport = Literal["stdio", "streamableHttp"]
StartupState = Literal["idle", "starting", "ready", "error", "disabled"]

_HTTP_SPELLINGS = frozenset({"streamablehttp", "streamable-http", "streamable_http", "http"})


class McpServerOrigin(WireModel):
    """Where an effective server comes from: the workspace, or an enabled plugin."""

    kind: Literal["workspace", "plugin"]
    plugin_id: str | None = None
    plugin_display_name: str | None = None
    declared_name: str | None = None  # the name inside the plugin's .mcp.json


class McpServerConfig(WireModel):
    """One MCP server, as configured (``origin``/``readOnly`` are output only)."""

    name: str
    enabled: bool = True
    transport: McpTransport = "stdio"
    command: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    env_vars: list[str] | None = None  # variables passed through from the server's environment
    cwd: str | None = None
    url: str | None = None
    bearer_token_env_var: str | None = None
    http_headers: dict[str, str] | None = None
    env_http_headers: dict[str, str] | None = None  # header -> name of the variable holding it
    startup_timeout_sec: float | None = None
    tool_timeout_sec: float | None = None
    origin: McpServerOrigin | None = None
    read_only: bool | None = None

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
    enabled: bool
    startup_state: StartupState
    tool_count: int = 0
    resource_count: int = 0
    resource_template_count: int = 0
    last_error: str | None = None
    transport: McpTransport
    origin: McpServerOrigin | None = None
    read_only: bool | None = None


class McpNameParams(WireModel):
    """``{name}`` of mcp/get and mcp/remove."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "docs"}]})

    name: str

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

    @field_validator("server")
    @classmethod
    def _bounded(cls, server: McpServerConfig) -> McpServerConfig:
        # What mcp/upsert stores (checked here, not on the model: stored and
        # plugin-declared servers are read through it).
        check_encoded_size(server, MAX_SERVER_CONFIG_BYTES)
        return server


class McpListResult(WireModel):
    servers: list[McpServerConfig]


class McpServerResult(WireModel):
    server: McpServerConfig


class McpRemoveResult(WireModel):
    removed: bool


class McpStatusListResult(WireModel):
    servers: list[McpServerStatus]


class McpTestResult(WireModel):
    """A probe's outcome; failures are results, not JSON-RPC errors (as in DotCraft)."""

    success: bool
    tool_count: int | None = None
    error_code: str | None = None
    error_message: str | None = None


class McpStatusUpdatedNotification(WireModel):
    server: McpServerStatus


_NOT_FOUND = (E.MCP_SERVER_NOT_FOUND, E.INVALID_PARAMS)

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
        (E.MCP_SERVER_VALIDATION_FAILED, E.MCP_SERVER_READ_ONLY, E.INVALID_PARAMS),
    ),
    MethodSpec(
        "mcp/remove",
        McpNameParams,
        McpRemoveResult,
        "mcpManagement",
        "Delete a workspace MCP server and disconnect it; emits `workspace/configChanged`.",
        (*_NOT_FOUND, E.MCP_SERVER_READ_ONLY),
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
        (E.MCP_SERVER_VALIDATION_FAILED, E.INVALID_PARAMS),
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
