"""Wire models and method-table entries of dynamic tools: the tools a client
declares in ``thread/start.dynamicTools`` and implements itself, called with the
``item/tool/call`` server->client request (reference §4.1, "Other
server->client requests"). See docs/tools.md.
"""

from typing import Any

from pydantic import field_validator

from appserver.protocol.acp_names import acp_method
from appserver.protocol.base import Flag, OpenWireModel, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class DynamicToolSpec(OpenWireModel):
    """A tool the client implements; the server calls it with `item/tool/call` (or, with
    `acpMethod`, `ext/acp/<family>/<method>`)."""

    namespace: str | None = None
    """Groups tools; with `name`, unique per request (not empty when given)."""
    name: str
    """The tool's name as the model sees it."""
    description: str
    """What the tool does, for the model."""
    input_schema: dict[str, Any]
    """JSON Schema of the tool's arguments."""
    defer_loading: Flag | None = None
    """Reserved; ignored."""
    approval: dict[str, Any] | None = None
    """Ask for approval before each call: `{kind, targetArgument, operation?,
    operationArgument?}` (`approvalType` = `kind`, e.g. `file`, `shell`,
    `remoteResource`; see `ChannelToolApproval`); a declined call is not sent."""

    acp_method: str | None = None
    """Ours: `_family/method` of a family the client lists in `acpExtensions.extensions`.
    A call is sent as `ext/acp/<family>/<method>` (`threadId` and the model's arguments)
    instead of `item/tool/call`, and the tool is offered only while the thread's client
    serves the family."""

    @field_validator("namespace")
    @classmethod
    def _namespace_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("'namespace' must not be empty")
        return value

    @field_validator("acp_method")
    @classmethod
    def _acp_method_names_a_family(cls, value: str | None) -> str | None:
        return None if value is None else acp_method(value)

    @field_validator("approval")
    @classmethod
    def _approval_names_kind_and_target(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # A typo must not silently leave the tool ungated.
        if value is not None:
            for key in ("kind", "targetArgument"):
                if not isinstance(value.get(key), str) or not value[key].strip():
                    raise ValueError(f"approval.{key} must be a non-empty string")
        return value


class ToolCallParams(WireModel):
    """The model called a tool the client declared (`item/tool/call`)."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn whose model called the tool."""
    call_id: str
    """The model's id of this call (the `dynamicToolCall` item's `callId`)."""
    namespace: str | None = None
    """The tool's namespace, as declared (absent when it has none)."""
    tool: str
    """The tool's name, as declared (without its namespace)."""
    arguments: dict[str, Any]
    """The arguments the model passed, a JSON object."""


class ToolCallResult(OpenWireModel):
    """The client's answer to `item/tool/call`."""

    success: Flag
    """Whether the tool ran; `false` gives the model a failed tool result."""
    content_items: list[dict[str, Any]] | None = None
    """What the model reads: `{type: "text", text}` and `{type: "image", imageUrl}` parts."""
    structured_result: Any = None
    """A JSON value for the model (sent as JSON text when there are no `contentItems`)."""
    error_code: str | None = None
    """Machine-readable reason the call failed."""
    error_message: str | None = None
    """Human-readable reason the call failed (the model sees it)."""


METHOD_SPECS: list[MethodSpec] = []
NOTIFICATION_SPECS: list[NotificationSpec] = []

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "item/tool/call",
        ToolCallParams,
        ToolCallResult,
        "Run a tool the client declared in `thread/start.dynamicTools`; sent to the connection "
        "that owns the thread. Answer `{success, contentItems?, structuredResult?, errorCode?, "
        "errorMessage?}`. No answer in time, a vanished client or an invalid answer fail the "
        "call (a failed `dynamicToolCall` item); the turn goes on.",
    ),
]
