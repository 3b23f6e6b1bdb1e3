"""Wire models and method-table entries of dynamic tools: the tools a client
declares in ``thread/start.dynamicTools`` and implements itself, called with the
``item/tool/call`` server->client request (reference §4.1, "Other
server->client requests"). See docs/tools.md.
"""

from __future__ import annotations

from typing import Any

from appserver.protocol.base import OpenWireModel, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


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

    success: bool
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
