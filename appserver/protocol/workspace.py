"""Wire models and method-table entries of ``model/list`` and ``workspace/config/*``
(reference §3.4 and §3.12).

Decisions where DotCraft and this server differ on purpose:

* ``workspace/config/update`` echoes ``apiKey`` masked (``"sk-…abcd"`` or
  ``"********"``); DotCraft echoes it in clear. A secret never leaves the server.
* ``provider`` is an extension of ``workspace/config/update`` (DotCraft only
  speaks OpenAI-compatible endpoints; this server has several providers).
* Model, key, endpoint and provider reload **hot** (the provider is rebuilt at
  once); DotCraft marks them ``processRestart``.
* ``model/list`` entries omit ``createdAt`` when the provider does not say.
"""

from typing import Any, Literal

from pydantic import ConfigDict, Field

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty, Flag, Name, PathText, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

ReloadBehavior = Literal["hot", "subsystemRestart", "processRestart"]


# --- model/list ---------------------------------------------------------------------


class ModelCatalogItem(WireModel):
    """One model the active provider offers."""

    id: str
    """The model's id (what `model` takes)."""
    owned_by: str = ""
    """Who offers it."""
    created_at: str | None = None  # ISO-8601 UTC; omitted when the provider does not say
    """When it was published, as the provider reports it."""


class ModelListResult(WireModel):
    """``model/list``: provider failures are in-band (``success: false``), never RPC errors."""

    success: Flag
    """Whether the provider answered."""
    models: list[ModelCatalogItem] = Field(default_factory=list)
    """The models."""
    error_code: str | None = None  # e.g. MissingApiKey, Unauthorized, Network, Timeout
    """Why the listing failed, e.g. `MissingApiKey`, `Unauthorized`, `Network`, `Timeout`."""
    error_message: str | None = None  # ends with " Endpoint: <url>" when the endpoint is known
    """Human-readable reason; ends with ` Endpoint: <url>` when the endpoint is known."""


# --- workspace/config/schema ------------------------------------------------------------


class ConfigSchemaField(WireModel):
    """One editable setting (DotCraft's ``ConfigSchemaField``)."""

    key: str  # the config.json key (PascalCase, matched case-insensitively)
    """The config.json key (PascalCase, matched case-insensitively)."""
    display_name: str | None = None
    """Label to show."""
    type: str  # "text", "password", "select", "number", "bool", ...
    """Editor to show: `text`, `password`, `select`, `number`, `bool`, ..."""
    sensitive: Flag = False  # the value is a secret: shown masked, never in clear
    """The value is a secret (mask it)."""
    options: list[str] | None = None  # for "select"
    """Allowed values (`select`)."""
    hint: str | None = None
    """Help text."""
    reload: ReloadBehavior = "processRestart"
    """What a change needs: `hot`, `processRestart` or `subsystemRestart`."""
    subsystem_key: str | None = None
    """The subsystem to restart (`subsystemRestart`)."""
    default_value: Any = None
    """Value when unset."""


class ConfigSchemaSection(WireModel):
    """A group of settings at ``path`` inside config.json (``null``: the root)."""

    section: str
    """Name of the group."""
    order: int
    """Position among the groups."""
    path: list[str] | None = None
    """Keys leading to the group in config.json (`null`: the root)."""
    fields: list[ConfigSchemaField]
    """Its settings."""


class WorkspaceConfigSchemaResult(WireModel):
    sections: list[ConfigSchemaSection]
    """The editable settings, by group."""


# --- workspace/config/update --------------------------------------------------------------


class WorkspaceConfigUpdateParams(WireModel):
    """Any subset of the settings; ``null`` or ``""`` removes a setting.

    Which fields were *present* matters (``model_fields_set``): an absent
    field is left alone, ``null`` deletes it. ``model: "Default"`` also
    removes the model (the provider's default applies).
    """

    # Documentation example: `{}` is refused (at least one setting is required).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"defaultApprovalPolicy": "default"}]}
    )

    model: Name | None = None
    """Default model; `null` or `""` removes it."""
    api_key: PathText | None = None
    """The provider's API key; `null` or `""` removes it."""
    end_point: PathText | None = None
    """The provider's base URL; `null` or `""` removes it."""
    default_approval_policy: Name | None = None  # "default" | "autoApprove" | null
    """Approval policy of new threads: `default` or `autoApprove`."""
    provider: Name | None = None  # extension: "offline" | "openai" | "anthropic" | null
    """The model provider; `null` or `""` removes it."""
    welcome_suggestions_enabled: Flag | None = None
    """Whether turns refresh the welcome suggestions (`welcome/suggestions`); `null` removes the
    setting (the workspace's `.craft/config.json`, else on)."""


class WorkspaceConfigUpdateResult(WireModel):
    """The resulting workspace values (absent = not set); ``apiKey`` is masked."""

    model: str | None = None
    """Default model."""
    api_key: str | None = None
    """The API key, masked."""
    end_point: str | None = None
    """The provider's base URL."""
    default_approval_policy: str | None = None
    """Approval policy of new threads."""
    provider: str | None = None
    """The model provider."""
    welcome_suggestions_enabled: Flag | None = None
    """The welcome suggestions setting of the user's settings for this workspace (absent: unset)."""


# --- workspace/trust ------------------------------------------------------------------


class WorkspaceTrustParams(WireModel):
    """``workspace/trust``: read the workspace's trust, or change it."""

    model_config = ConfigDict(json_schema_extra={"examples": [{}, {"trusted": True}]})

    trusted: Flag | None = None
    """`true` trusts the workspace (recorded in the user's settings, outside it), `false`
    withdraws that from the next start on; absent only reads."""


class WorkspaceTrustResult(WireModel):
    """Whether the workspace's own files may run code, and why."""

    trusted: Flag
    """`false`: its MCP servers, plugins, cron jobs, periodic heartbeat and `autoApprove`
    threads stay off until it is trusted."""
    reason: str
    """Why it is or is not trusted, for people."""
    workspace_path: str
    """The workspace."""


# --- workspace/status -----------------------------------------------------------------


class WorkspaceStatusResult(WireModel):
    """What the server works on and with: for a header, a status line, `/status`."""

    workspace_path: str
    """The workspace."""
    provider: str
    """The model provider in use (`offline`, `openai`, `anthropic`)."""
    model: str
    """The model new threads use unless they set one (`thread/start` `config.model`)."""
    endpoint: str | None = None
    """The provider's API address, when it has one."""
    default_approval_policy: str
    """The approval policy of threads that set none (`default`, `autoApprove`, `interrupt`)."""
    trusted: Flag
    """Whether the workspace's own files may run code (`workspace/trust`)."""
    version: str
    """The server's version."""


METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "workspace/status",
        Empty,
        WorkspaceStatusResult,
        "workspaceConfigManagement",
        "The workspace, the provider and model in use, the default approval policy and trust, in "
        "one answer. Ours, not DotCraft's.",
        access="read",
    ),
    MethodSpec(
        "model/list",
        Empty,
        ModelListResult,
        "modelCatalogManagement",
        "Models of the active provider. Provider failures are returned in-band as "
        "`success: false` with `errorCode`/`errorMessage`, not as JSON-RPC errors.",
        access="read",
    ),
    MethodSpec(
        "workspace/config/schema",
        Empty,
        WorkspaceConfigSchemaResult,
        "workspaceConfigManagement",
        "The editable workspace settings: sections of fields with type, sensitivity and "
        "reload behaviour. Never carries values.",
        access="read",
    ),
    MethodSpec(
        "workspace/config/update",
        WorkspaceConfigUpdateParams,
        WorkspaceConfigUpdateResult,
        "workspaceConfigManagement",
        "Set model, apiKey, endPoint, defaultApprovalPolicy, provider and/or "
        "welcomeSuggestionsEnabled in the user's settings for this workspace (outside it, "
        "0600) and apply them at once. Emits `workspace/configChanged` for the regions that "
        "really changed (`welcomeSuggestions` for the last). The result masks `apiKey`.",
        (rpc_errors.INVALID_PARAMS,),
    ),
    MethodSpec(
        "workspace/trust",
        WorkspaceTrustParams,
        WorkspaceTrustResult,
        "workspaceConfigManagement",
        "Read or set whether this workspace's own files (`.craft/`: its database's MCP servers, "
        "cron jobs and thread policies, its plugins) may run code. Trust is kept in the user's "
        "settings, outside the workspace; trusting starts what waited for it.",
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
