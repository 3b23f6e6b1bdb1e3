"""Wire models for the ``initialize`` handshake."""

from typing import Any

from pydantic import Field

from appserver.protocol.base import Flag, Name, OpenWireModel, WireModel
from appserver.protocol.editor_fs import AcpExtensionsCapability
from appserver.protocol.node_repl import BrowserUseCapability, NodeReplCapability


class ClientInfo(WireModel):
    # The name is stored as a turn's ``initiator.userId``.
    """Who is connecting (`initialize`)."""

    name: Name
    """The client's program name (logged; `thread/resumed` `resumedBy`; an adapter's channel name).
    """
    title: Name | None = None
    """Human-readable name of the client."""
    version: Name
    """The client's version."""


class ClientCapabilities(OpenWireModel):
    """What the client can do. Unknown members are kept (and ignored)."""

    approval_support: Flag = True
    """The client answers `item/approval/request`; without it approvals follow the thread's policy.
    """
    streaming_support: Flag = True
    """Send `*/delta` notifications; `false`: only completed items."""
    command_execution_streaming: Flag = False
    """Send `item/commandExecution/outputDelta` as a command runs."""
    tool_execution_lifecycle: Flag = False
    """Send `toolExecution` items around tool runs."""
    background_terminals: Flag = False
    """Send the `terminal/*` notifications (background terminals started, output, ended)."""
    config_change: Flag = True
    """Send `workspace/configChanged`."""
    opt_out_notification_methods: list[str] = Field(default_factory=list)
    """Notification methods this connection never receives."""
    channel_adapter: dict[str, Any] | None = None
    """The client is an external channel adapter (see `ext/channel/*`)."""
    acp_extensions: AcpExtensionsCapability | None = None
    """The client serves `ext/acp/*` requests (an IDE): the file tools of the threads bound
    to it read and write through `ext/acp/fs/*`, `shell` runs in its terminals, the tools of
    the families it lists send `ext/acp/<family>/<method>`."""
    node_repl: NodeReplCapability | None = None
    """The client hosts a Node REPL per thread; with `browserUse` too, the threads bound to it
    are offered `NodeReplJs` (`ext/nodeRepl/*`)."""
    browser_use: BrowserUseCapability | None = None
    """The client's REPL drives an embedded browser (needed with `nodeRepl`)."""


class InitializeParams(WireModel):
    """The first request of every connection."""

    client_info: ClientInfo
    """Who is connecting."""
    capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities)
    """What the client can do."""


class ServerInfo(WireModel):
    """The server's name and versions."""

    name: str
    """The server's name (`appserver`)."""
    version: str
    """The server's version."""
    protocol_version: str = "1"
    """The protocol version (`1`)."""
    extensions: list[str] = Field(default_factory=list)
    """Protocol extensions the server supports."""


class InitializeResult(WireModel):
    """The server's answer to `initialize`."""

    server_info: ServerInfo
    """The server's name, version and protocol version."""
    # Flat map of capability flag -> true, plus ``extensions``; derived from
    # the method table so nothing is advertised that does not answer.
    capabilities: dict[str, Any]
    """Method families the server offers, as `{name: true}`; a method's `capability` must be here.
    """
