"""The adapter side of external channels (DotCraft ``external-channel-adapter.md``).

A client whose ``initialize`` carries ``capabilities.channelAdapter`` is the
remote backend of one external channel (Telegram, Feishu, ...). Right after
the ``initialize`` response the hub looks the channel up:

* registered, enabled, ``websocket`` transport: the connection is attached to
  the channel (``channel/status`` reports it ``running``);
* otherwise: ``system/event {kind: "channelRejected", channelName, message}``
  is sent (before ``initialized``: the client must learn why) and the
  connection is closed with WebSocket code 1008.

The check applies on every transport (DotCraft only routes adapters over
WebSocket; over stdio or in-process the same rule is simply kept).

Turns an attached adapter starts with ``turn/start`` are attributed to its
channel: the turn's ``originChannel`` and ``initiator.channelName`` are the
channel name, ``initiator.userId`` the ``sender.senderId``, and the
``userMessage`` item carries ``channelName`` (and the thread's
``channelContext``) next to the sender fields. When such a turn completes,
its final agent text is sent to the adapter with the server->client request
``ext/channel/send`` (to the starting connection, or to the channel's newest
attached one if that connection is gone), but only to adapters that
advertised ``deliveryCapabilities.structuredDelivery: true`` (DotCraft's
condition for unified delivery; an adapter that posts replies itself from
``turn/completed`` leaves it unset). Failed or cancelled turns, and turns
whose final text is empty, send nothing. Delivery failures are logged and
never affect the turn or the connection.

Channel tools: the ``channelTools`` an adapter registers are offered to the
model on the turns of the channel's threads (the hub is the runtime's
:class:`~appserver.runtime.turns.client_tools.ChannelToolSource`); a call becomes
``ext/channel/toolCall`` to the adapter that started the turn, else the
channel's newest attached adapter, with the approval machinery's timeout and
reconnect grace (an adapter that attaches while a call waits is asked it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from appserver.protocol import channels as channel_wire
from appserver.protocol.initialize import InitializeParams
from appserver.rpc.connection import RequestContext
from appserver.rpc.server_requests import ServerRequestError
from appserver.runtime.events import Participant
from appserver.runtime.turns import ActiveTurn, UserInput
from appserver.runtime.turns.client_tools import ClientTool
from appserver.services.channels_waiting import reject_adapter
from appserver.services.peer import Peer, peer_of
from appserver.storage.channels import ExternalChannelRecord, ExternalChannelRepository

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.channels")

ATTR = "channelAdapter"  # key of the binding in Peer.attrs


@dataclass
class AdapterBinding:
    """What an attached adapter connection serves."""

    channel_name: str  # the configured spelling
    capability: channel_wire.ChannelAdapterCapability

    @property
    def structured_delivery(self) -> bool:
        caps = self.capability.delivery_capabilities or {}
        return caps.get("structuredDelivery") is True


def binding_of(participant: Participant | None) -> AdapterBinding | None:
    """The adapter binding of a client (``None`` for ordinary clients)."""
    if not isinstance(participant, Peer):
        return None
    binding = participant.attrs.get(ATTR)
    return binding if isinstance(binding, AdapterBinding) else None


class AdapterHub:
    """Admits or rejects adapters, attributes their turns, delivers replies."""

    def __init__(self, server: FamilyContext, repo: ExternalChannelRepository) -> None:
        self.server = server
        self.repo = repo
        # lower-cased channel name -> attached peers, oldest first
        self.attached: dict[str, list[Peer]] = {}
        # lower-cased channel name -> (model name -> tool, requires a chat context),
        # from the channel's most recently attached adapter (kept while it reconnects)
        self.tools: dict[str, dict[str, tuple[ClientTool, bool]]] = {}

    @property
    def _client_tools(self) -> Any:
        return self.server.runtime.engine.agent.tools.client_tools

    def install(self) -> None:
        self._client_tools.channel_source = self
        self.server.router.initialize_hooks.append(self.on_initialize)
        self.server.router.closed_hooks.append(self.on_closed)
        self.server.router.ready_hooks.append(self.on_ready)
        self.server.turns.start_hooks.append(self.on_turn_start)
        self.server.runtime.engine.turn_listeners.append(self.on_turn_finished)

    # --- admission ------------------------------------------------------------------

    def on_initialize(self, ctx: RequestContext, request: InitializeParams) -> None:
        raw = request.capabilities.channel_adapter
        if raw is None:
            return
        connection = peer_of(ctx)
        try:
            capability = channel_wire.ChannelAdapterCapability.model_validate(raw)
        except ValidationError:
            name = str(raw.get("channelName", "")) if isinstance(raw, dict) else ""
            message = "'channelAdapter.channelName' is required."
            ctx.after_response(lambda: self.reject(connection, name, message))
            return
        ctx.after_response(lambda: self._admit(connection, capability))

    async def _admit(
        self, connection: Peer, capability: channel_wire.ChannelAdapterCapability
    ) -> None:
        name = capability.channel_name.strip()
        try:
            record = await self.repo.get(name) if name else None
        except Exception:
            log.exception("could not look up channel %r", name)
            self.reject(connection, name, f"Channel '{name}' could not be checked.")
            return
        reason = self._refusal(name, record)
        if reason is not None or record is None:
            self.reject(connection, name, reason or "")
            return
        if connection.closed:
            return  # gone while we looked
        connection.attrs[ATTR] = AdapterBinding(record.name, capability)
        self.attached.setdefault(record.name.lower(), []).append(connection)
        self.tools[record.name.lower()] = self._declared_tools(record.name, capability)
        log.info("channel adapter attached: %s (%s)", record.name, connection.name)
        # A call of the channel's tools waiting for an adapter is asked of this one
        # (once it is ready: here if `initialized` came first, else in on_ready).
        self._client_tools.adapter_attached(record.name, connection)

    def on_ready(self, connection: Peer) -> None:
        binding = binding_of(connection)
        if binding is not None:
            self._client_tools.adapter_attached(binding.channel_name, connection)

    @staticmethod
    def _declared_tools(
        channel: str, capability: channel_wire.ChannelAdapterCapability
    ) -> dict[str, tuple[ClientTool, bool]]:
        """The adapter's ``channelTools``; an invalid descriptor is dropped (logged)."""
        tools: dict[str, tuple[ClientTool, bool]] = {}
        for raw in capability.channel_tools or []:
            try:
                descriptor = channel_wire.ChannelToolDescriptor.model_validate(raw)
            except ValidationError as exc:
                log.warning("%s adapter: invalid channel tool dropped: %s", channel, exc)
                continue
            name = descriptor.name.strip()
            if not name or name in tools:
                log.warning("%s adapter: channel tool %r dropped (blank, repeated)", channel, name)
                continue
            tool = ClientTool(
                namespace=None,
                name=name,
                description=descriptor.description,
                input_schema=dict(descriptor.input_schema),
                channel=channel,
                approval=(
                    descriptor.approval.model_dump(by_alias=True, exclude_none=True)
                    if descriptor.approval is not None
                    else None
                ),
            )
            tools[name] = (tool, descriptor.requires_chat_context)
        return tools

    @staticmethod
    def _refusal(name: str, record: ExternalChannelRecord | None) -> str | None:
        if record is None:
            return f"Channel '{name}' is not registered in server configuration."
        if not record.enabled:
            return f"Channel '{name}' is disabled in server configuration."
        if record.transport != "websocket":
            return (
                f"Channel '{name}' is subprocess-only; WebSocket adapter attach is not supported."
            )
        return None

    def reject(self, connection: Peer, name: str, message: str) -> None:
        """``system/event channelRejected``, then close (code 1008)."""
        reject_adapter(connection, name, message)

    def on_closed(self, connection: Peer) -> None:
        binding = binding_of(connection)
        if binding is None:
            return
        key = binding.channel_name.lower()
        remaining = [c for c in self.attached.get(key, []) if c is not connection]
        if remaining:
            self.attached[key] = remaining
        else:
            self.attached.pop(key, None)

    def detach_all(self, name: str, message: str) -> None:
        """Disconnect every adapter of ``name`` (the channel was removed or changed)."""
        self.tools.pop(name.lower(), None)
        for connection in list(self.attached.get(name.lower(), [])):
            self.reject(connection, name, message)

    def is_running(self, name: str) -> bool:
        return any(not c.closed for c in self.attached.get(name.lower(), []))

    # --- attribution -----------------------------------------------------------------

    def on_turn_start(self, ctx: RequestContext, active: ActiveTurn, user: UserInput) -> None:
        peer = peer_of(ctx)
        binding = binding_of(peer)
        if binding is None:
            return
        name = binding.channel_name
        initiator: dict[str, Any] = {"channelName": name}
        sender = user.sender
        if sender is not None:
            initiator.update(
                userId=sender.sender_id,
                userName=sender.sender_name,
                userRole=sender.sender_role,
                groupId=sender.group_id,
            )
        else:
            initiator["userId"] = peer.name
        if active.thread.channel_context:
            initiator["channelContext"] = active.thread.channel_context
        active.record.origin_channel = name
        active.record.initiator = {k: v for k, v in initiator.items() if v is not None}
        user.extra["channelName"] = name
        if active.thread.channel_context:
            user.extra["channelContext"] = active.thread.channel_context

    # --- channel tools (a ChannelToolSource) -------------------------------------------

    def channel_tools(self, active: ActiveTurn) -> list[ClientTool]:
        """The tools of the turn's channel: the thread's origin channel, or the
        channel of the adapter that started the turn."""
        channels = {active.thread.origin_channel.lower()}
        if active.record.origin_channel:
            channels.add(active.record.origin_channel.lower())
        initiator = active.record.initiator or {}
        has_chat = bool(active.thread.channel_context or initiator.get("groupId"))
        return [
            tool
            for channel in sorted(channels)
            for tool, needs_chat in self.tools.get(channel, {}).values()
            if has_chat or not needs_chat
        ]

    def channel_caller(self, active: ActiveTurn, channel: str) -> Participant | None:
        """The adapter that started the turn, else the channel's newest attached one."""
        origin = binding_of(active.origin)
        if (
            origin is not None
            and origin.channel_name.lower() == channel.lower()
            and active.origin is not None
            and not active.origin.closed
        ):
            return active.origin
        for connection in reversed(self.attached.get(channel.lower(), [])):
            if not connection.closed:
                return connection
        return None

    def channel_call_params(
        self, active: ActiveTurn, tool: ClientTool, call_id: str, arguments: dict[str, Any]
    ) -> channel_wire.ChannelToolCallParams:
        initiator = active.record.initiator or {}
        same_channel = str(initiator.get("channelName") or "").lower() == str(tool.channel).lower()
        sender = initiator.get("userId") if same_channel else None
        group = initiator.get("groupId") if same_channel else None
        return channel_wire.ChannelToolCallParams(
            thread_id=active.thread_id,
            turn_id=active.record.id,
            call_id=call_id,
            tool=tool.name,
            arguments=arguments,
            context=channel_wire.ChannelToolCallContext(
                channel_name=str(tool.channel),
                channel_context=active.thread.channel_context,
                sender_id=str(sender) if sender else active.thread.user_id,
                group_id=str(group) if group else None,
            ),
        )

    # --- delivery ------------------------------------------------------------------------

    def on_turn_finished(self, active: ActiveTurn) -> Awaitable[None] | None:
        binding = binding_of(active.origin)
        if binding is None or active.record.status != "completed":
            return None
        if not binding.structured_delivery:
            return None
        text = active.final_text()
        if not text.strip():
            return None
        return self._deliver(binding, active, text)

    def _target_connection(self, binding: AdapterBinding, active: ActiveTurn) -> Peer | None:
        origin = active.origin
        if isinstance(origin, Peer) and not origin.closed:
            return origin
        # The adapter reconnected: its newest connection for the channel delivers.
        for connection in reversed(self.attached.get(binding.channel_name.lower(), [])):
            current = binding_of(connection)
            if not connection.closed and current is not None and current.structured_delivery:
                return connection
        return None

    async def _deliver(self, binding: AdapterBinding, active: ActiveTurn, text: str) -> None:
        initiator = active.record.initiator or {}
        sender_id = initiator.get("userId")
        group_id = initiator.get("groupId")
        metadata: dict[str, Any] = {
            "threadId": active.thread_id,
            "turnId": active.record.id,
            "channelName": binding.channel_name,
            "channelContext": active.thread.channel_context,
            "senderId": sender_id,
            "groupId": group_id,
        }
        params = channel_wire.ChannelSendParams(
            # DotCraft: the group is the delivery target; without one, the sender.
            target=str(group_id or sender_id or active.thread.user_id),
            message=channel_wire.ChannelOutboundMessage(kind="text", text=text),
            metadata={k: v for k, v in metadata.items() if v is not None},
        )
        connection = self._target_connection(binding, active)
        if connection is None:
            log.warning(
                "no %s adapter attached; reply of %s/%s not delivered",
                binding.channel_name,
                active.thread_id,
                active.record.id,
            )
            return
        try:
            raw = await connection.connection.request("ext/channel/send", params)
            result = channel_wire.ChannelSendResult.model_validate(
                raw if isinstance(raw, dict) else {}
            )
        except (ServerRequestError, ValidationError) as exc:
            log.warning("ext/channel/send to %s failed: %s", binding.channel_name, exc)
            return
        if not result.delivered:
            log.warning(
                "%s adapter did not deliver the reply of %s: %s %s",
                binding.channel_name,
                active.record.id,
                result.error_code or "",
                result.error_message or "",
            )
