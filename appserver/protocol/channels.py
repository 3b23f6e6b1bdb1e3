"""Wire models and method-table entries of the ``channels`` family: ``channel/list``,
``channel/status``, ``externalChannel/*``, the adapter side (``system/event``
``channelRejected``) and the ``ext/channel/send`` server->client request
(reference §3.2, §3.10, §4, §6; DotCraft ``specs/external-channel-adapter.md``).

Decisions:

* ``ext/channel/send.target`` is a **string**, as in DotCraft's spec and code
  (``ExtChannelSendParams.Target``; its adapter SDKs read ``str(target)``):
  the platform delivery target, i.e. the sender's ``groupId`` or, without
  one, its ``senderId``. Everything else about the destination (channel,
  channel context, sender, group, thread, turn) travels in ``metadata``.
* ``channel/list`` carries no capability flag: DotCraft serves it
  unconditionally (it is not gated in ``AppServerRequestHandler``).
"""

from typing import Any, Literal

from pydantic import Field, field_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty, Flag, OpenWireModel, WireModel
from appserver.protocol.limits import (
    MAX_NAME_CHARS,
    MAX_SERVER_CONFIG_BYTES,
    check_encoded_size,
    check_length,
)
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

ChannelCategory = Literal["builtin", "social", "system", "external"]
ChannelTransport = Literal["subprocess", "websocket"]


# --- channel/list, channel/status -------------------------------------------------------


class ChannelInfo(WireModel):
    """A channel name threads can originate from (``originChannel`` values)."""

    name: str
    """Channel name, as it appears in a thread's `originChannel`."""
    category: ChannelCategory
    """What kind of channel it is."""


class ChannelListResult(WireModel):
    channels: list[ChannelInfo]
    """Every channel name threads can originate from."""


class ChannelStatusInfo(WireModel):
    """Runtime state of a configured channel."""

    name: str
    """Channel name."""
    category: Literal["social", "external"]
    """What kind of channel it is."""
    enabled: Flag
    """Whether the channel is enabled in the configuration."""
    running: bool  # an adapter connection is attached right now
    """An adapter connection is attached right now."""


class ChannelStatusResult(WireModel):
    channels: list[ChannelStatusInfo]
    """Every configured channel and its runtime state."""


# --- externalChannel/* -------------------------------------------------------------------


class ExternalChannelConfig(WireModel):
    """One external channel (DotCraft's ``ExternalChannelConfigWire``).

    Transport names are case-insensitive on input and lower-case on output.
    Semantic checks (command required for subprocess, none of the subprocess
    fields for websocket) answer ``-32081``, not ``-32602``.
    """

    name: str
    """Channel name; adapters identify themselves with it (`initialize` `clientInfo.name`)."""
    enabled: Flag = True
    """Whether the channel is enabled."""
    transport: str = "subprocess"
    """`subprocess` (the server starts `command`) or `websocket` (the adapter connects);
    case-insensitive.
    """
    command: str | None = None
    """Program the server starts for a `subprocess` channel."""
    args: list[str] | None = None
    """Arguments of `command`."""
    working_directory: str | None = None
    """Working directory of the started adapter."""
    env: dict[str, str] | None = None
    """Extra environment variables of the started adapter."""


class ExternalChannelListResult(WireModel):
    channels: list[ExternalChannelConfig]
    """Every configured external channel."""


class ExternalChannelNameParams(WireModel):
    name: str
    """Name of the external channel."""

    @field_validator("name")
    @classmethod
    def _non_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("must not be empty")
        return name.strip()


class ExternalChannelResult(WireModel):
    channel: ExternalChannelConfig
    """The channel's configuration as stored."""


class ExternalChannelUpsertParams(WireModel):
    channel: ExternalChannelConfig
    """The channel to add, or to replace (matched by `name`)."""

    @field_validator("channel")
    @classmethod
    def _bounded(cls, channel: ExternalChannelConfig) -> ExternalChannelConfig:
        # Bounds of what is stored (checked here, not on the model: stored channels
        # are read back through it).
        check_length(channel.name, MAX_NAME_CHARS, "name")
        check_encoded_size(channel, MAX_SERVER_CONFIG_BYTES)
        return channel


class ExternalChannelRemoveResult(WireModel):
    removed: Flag = True
    """Whether a channel of that name existed and was removed."""


# --- adapter side ----------------------------------------------------------------------------


class ChannelToolDisplay(OpenWireModel):
    """How a client may show a channel tool (not used by this server)."""

    icon: str | None = None
    """Icon name or URL."""
    title: str | None = None
    """Display title."""
    subtitle: str | None = None
    """Display subtitle."""


class ChannelToolApproval(OpenWireModel):
    """Ask for approval before a call of a channel (or dynamic) tool: the
    `approvalRequest` has `approvalType: kind`, the target from `targetArgument`,
    the operation from `operationArgument`, else `operation`, else the tool's name."""

    kind: str = Field(min_length=1)
    """`file`, `shell` or `remoteResource`."""
    target_argument: str = Field(min_length=1)
    """The argument holding the approval target."""
    operation: str | None = None
    """The operation to approve."""
    operation_argument: str | None = None
    """The argument holding the operation."""


class ChannelToolDescriptor(OpenWireModel):
    """A tool an external channel adapter implements (`channelAdapter.channelTools`).

    Offered to the model on the turns of threads of that channel under its
    `name`; a call becomes `ext/channel/toolCall` to the adapter.
    """

    name: str
    """The tool's name (PascalCase in DotCraft), as the model sees it."""
    description: str = ""
    """What the tool does, for the model."""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON schema of the tool's arguments (an object)."""
    output_schema: dict[str, Any] | None = None
    """JSON schema of `structuredResult` (informative)."""
    display: ChannelToolDisplay | None = None
    """How a client may show the tool."""
    requires_chat_context: Flag = False
    """Only offered on turns with a chat context (a `channelContext` or a `groupId`)."""
    approval: ChannelToolApproval | None = None
    """Ask for approval before each call (by the thread's approval policy, like a
    built-in tool); a declined call is not sent to the adapter."""
    defer_loading: Flag | None = None
    """Reserved by DotCraft; ignored."""


class ChannelAdapterCapability(OpenWireModel):
    """``initialize.capabilities.channelAdapter``: this connection is a channel's backend."""

    channel_name: str
    """The configured external channel this connection serves."""
    delivery_capabilities: dict[str, Any] | None = None
    """What the adapter can deliver (`structuredDelivery`, `media`)."""
    channel_tools: list[dict[str, Any]] | None = None
    """`ChannelToolDescriptor` objects; each is checked on its own (an invalid one is dropped)."""


class SystemEventNotification(OpenWireModel):
    """``system/event``: compaction/consolidation progress of a thread, or
    (``kind: channelRejected``) the refusal of a channel adapter's handshake."""

    kind: str
    """What happened: compaction or consolidation progress, or `channelRejected`."""
    thread_id: str | None = None
    """The thread concerned (absent for connection-level events)."""
    turn_id: str | None = None
    """The turn concerned, if any."""
    channel_name: str | None = None
    """The rejected channel's name (`kind: "channelRejected"`)."""
    message: str | None = None
    """Human-readable description of the event."""
    percent_left: float | None = None
    """Context window left after compaction, in percent."""
    token_count: int | None = None
    """Tokens in the context after compaction."""


class ChannelMediaSource(OpenWireModel):
    kind: str  # hostPath | url | dataBase64 | artifactId
    """Where the media is: `hostPath`, `url`, `dataBase64` or `artifactId`."""
    host_path: str | None = None
    """Path on the server's host (`kind: "hostPath"`)."""
    url: str | None = None
    """URL to fetch the media from (`kind: "url"`)."""
    data_base64: str | None = None
    """The media itself, base64-encoded (`kind: "dataBase64"`)."""
    artifact_id: str | None = None
    """Id of a stored artifact (`kind: "artifactId"`)."""


class ChannelOutboundMessage(WireModel):
    """What to deliver: this server sends ``kind: "text"`` with the agent's final reply."""

    kind: Literal["text", "file", "audio", "image", "video"] = "text"
    """Message kind: `text`, `file`, `audio`, `image` or `video`."""
    text: str | None = None
    """The text to deliver (`kind: "text"`)."""
    caption: str | None = None
    """Caption shown with a media message."""
    file_name: str | None = None
    """File name to show for a media message."""
    media_type: str | None = None
    """MIME type of the media."""
    source: ChannelMediaSource | None = None
    """Where the media comes from."""


class ChannelSendParams(WireModel):
    """``ext/channel/send`` params. ``metadata`` carries ``threadId``, ``turnId``,
    ``channelName`` and, when known, ``channelContext``, ``senderId``, ``groupId``."""

    target: str
    """Where to deliver on the channel: the thread's `channelContext` (chat, group or user id)."""
    message: ChannelOutboundMessage
    """What to deliver."""
    metadata: dict[str, Any] | None = None
    """Context for the adapter: `threadId`, `turnId`, `channelName` and similar keys."""


class ChannelSendResult(OpenWireModel):
    delivered: Flag = False
    """Whether the adapter delivered the message."""
    remote_message_id: str | None = None
    """The platform's id of the delivered message, if it has one."""
    remote_media_id: str | None = None
    """The platform's id of uploaded media, if any."""
    error_code: str | None = None
    """Machine-readable reason the delivery failed."""
    error_message: str | None = None
    """Human-readable reason the delivery failed."""


class ChannelToolCallContext(WireModel):
    """Where the call comes from, for the adapter (`ext/channel/toolCall.context`)."""

    channel_name: str
    """The configured channel name."""
    channel_context: str | None = None
    """The thread's `channelContext` (absent when it has none)."""
    sender_id: str | None = None
    """The sender of the turn's message (`initiator.userId`), else the thread's user id."""
    group_id: str | None = None
    """The chat (group) of the turn's message, when the sender gave one."""


class ChannelToolCallParams(WireModel):
    """The model called a tool the adapter registered (`ext/channel/toolCall`)."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn whose model called the tool."""
    call_id: str
    """The model's id of this call (the `pluginFunctionCall` item's `callId`)."""
    tool: str
    """The tool's name, as registered in `channelTools`."""
    arguments: dict[str, Any]
    """The arguments the model passed, a JSON object."""
    context: ChannelToolCallContext
    """The channel, chat and sender of the turn."""


class ChannelToolCallResult(OpenWireModel):
    """The adapter's answer to `ext/channel/toolCall`."""

    success: Flag
    """Whether the tool ran; `false` gives the model a failed tool result."""
    content_items: list[dict[str, Any]] | None = None
    """What the model reads: `{type: "text", text}` parts (`{type: "image", imageUrl}` too)."""
    structured_result: Any = None
    """A JSON value for the model (sent as JSON text when there are no `contentItems`)."""
    error_code: str | None = None
    """Machine-readable reason the call failed."""
    error_message: str | None = None
    """Human-readable reason the call failed (the model sees it)."""


_NOT_FOUND = (rpc_errors.INVALID_PARAMS, rpc_errors.EXTERNAL_CHANNEL_NOT_FOUND)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "channel/list",
        Empty,
        ChannelListResult,
        None,
        "Channel names threads can originate from: this server's built-in and system "
        "channels plus enabled external channels, by category then name.",
        access="read",
    ),
    MethodSpec(
        "channel/status",
        Empty,
        ChannelStatusResult,
        "channelStatus",
        "Every configured external channel with `enabled` and `running` (an adapter "
        "connection is attached).",
        access="read",
    ),
    MethodSpec(
        "externalChannel/list",
        Empty,
        ExternalChannelListResult,
        "externalChannelManagement",
        "Every external channel configuration, by name.",
        access="read",
    ),
    MethodSpec(
        "externalChannel/get",
        ExternalChannelNameParams,
        ExternalChannelResult,
        "externalChannelManagement",
        "One external channel configuration (name matched case-insensitively).",
        _NOT_FOUND,
        access="read",
    ),
    MethodSpec(
        "externalChannel/upsert",
        ExternalChannelUpsertParams,
        ExternalChannelResult,
        "externalChannelManagement",
        "Create or fully replace an external channel; emits `workspace/configChanged` "
        "(`externalChannel`). Adapters attached to a channel that is now disabled or "
        "subprocess-only are disconnected.",
        (
            rpc_errors.INVALID_PARAMS,
            rpc_errors.EXTERNAL_CHANNEL_VALIDATION_FAILED,
            rpc_errors.EXTERNAL_CHANNEL_NAME_CONFLICT,
        ),
    ),
    MethodSpec(
        "externalChannel/remove",
        ExternalChannelNameParams,
        ExternalChannelRemoveResult,
        "externalChannelManagement",
        "Delete an external channel; its attached adapters are disconnected. Emits "
        "`workspace/configChanged` (`externalChannel`).",
        _NOT_FOUND,
    ),
]

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "system/event",
        SystemEventNotification,
        "compaction kinds: thread-scoped, within the compacting turn (before its terminal "
        "event); `channelRejected`: the rejected adapter only, right after its `initialize` "
        "response (before `initialized`), then the connection closes",
        "A system event: context compaction progress (`compacting`, `compacted`, "
        "`compactSkipped`, `compactFailed`, with `tokenCount`/`percentLeft`), or "
        "`kind: channelRejected` refusing a channel adapter.",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "ext/channel/send",
        ChannelSendParams,
        ChannelSendResult,
        "Deliver the final reply of a turn an adapter started to its platform target. "
        "Answer `{delivered, remoteMessageId?, errorCode?, errorMessage?}`.",
    ),
    ServerRequestSpec(
        "ext/channel/toolCall",
        ChannelToolCallParams,
        ChannelToolCallResult,
        "Run a tool the adapter registered in `channelAdapter.channelTools`; sent to the "
        "adapter that started the turn, else the channel's newest attached adapter. Answer "
        "`{success, contentItems?, structuredResult?, errorCode?, errorMessage?}`. No answer "
        "in time, a vanished adapter or an invalid answer fail the call (a failed "
        "`pluginFunctionCall` item); the turn goes on.",
    ),
]
