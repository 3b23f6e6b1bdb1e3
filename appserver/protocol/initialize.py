"""Wire models for the ``initialize`` handshake."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from appserver.protocol.base import OpenWireModel, WireModel
from appserver.protocol.limits import Name


class ClientInfo(WireModel):
    # The name is stored as a turn's ``initiator.userId``.
    name: Name
    title: Name | None = None
    version: Name


class ClientCapabilities(OpenWireModel):
    """What the client can do. Unknown members are kept (and ignored)."""

    approval_support: bool = True
    streaming_support: bool = True
    command_execution_streaming: bool = False
    tool_execution_lifecycle: bool = False
    background_terminals: bool = False
    config_change: bool = True
    opt_out_notification_methods: list[str] = Field(default_factory=list)
    channel_adapter: dict[str, Any] | None = None


class InitializeParams(WireModel):
    client_info: ClientInfo
    capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities)


class ServerInfo(WireModel):
    name: str
    version: str
    protocol_version: str = "1"
    extensions: list[str] = Field(default_factory=list)


class InitializeResult(WireModel):
    server_info: ServerInfo
    # Flat map of capability flag -> true, plus ``extensions``; derived from
    # the method table so nothing is advertised that does not answer.
    capabilities: dict[str, Any]
