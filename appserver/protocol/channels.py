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

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from appserver.protocol import errors as E
from appserver.protocol.base import Empty, OpenWireModel, WireModel
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
    enabled: bool
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
    enabled: bool = True
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
    removed: bool = True
    """Whether a channel of that name existed and was removed."""


# --- adapter side ----------------------------------------------------------------------------


class ChannelAdapterCapability(OpenWireModel):
    """``initialize.capabilities.channelAdapter``: this connection is a channel's backend."""

    channel_name: str
    delivery_capabilities: dict[str, Any] | None = None
    channel_tools: list[dict[str, Any]] | None = None


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
    delivered: bool = False
    """Whether the adapter delivered the message."""
    remote_message_id: str | None = None
    """The platform's id of the delivered message, if it has one."""
    remote_media_id: str | None = None
    """The platform's id of uploaded media, if any."""
    error_code: str | None = None
    """Machine-readable reason the delivery failed."""
    error_message: str | None = None
    """Human-readable reason the delivery failed."""


_NOT_FOUND = (E.INVALID_PARAMS, E.EXTERNAL_CHANNEL_NOT_FOUND)

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
            E.INVALID_PARAMS,
            E.EXTERNAL_CHANNEL_VALIDATION_FAILED,
            E.EXTERNAL_CHANNEL_NAME_CONFLICT,
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
]
