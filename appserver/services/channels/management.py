"""``channel/list``, ``channel/status`` and ``externalChannel/*``.

External channel configurations live in SQLite (:mod:`appserver.storage.channels`),
not in DotCraft's ``ExternalChannels`` section of ``.craft/config.json``.
Validation follows DotCraft's ``ValidateExternalChannelConfigWire``: a
subprocess channel needs a ``command``, a websocket channel may not carry any
subprocess field (``-32081``); a name equal to a native channel (built-in or
system) is refused (``-32082``).

Subprocess adapters are **not spawned** by this server: such channels are
stored, validated, listed and reported (``running: false``), and a
WebSocket adapter that claims one is rejected, as DotCraft does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.protocol import channels as channel_wire
from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty
from appserver.protocol.errors import RpcError
from appserver.rpc.connection import RequestContext
from appserver.storage.channels import ExternalChannelRecord, ExternalChannelRepository

if TYPE_CHECKING:
    from appserver.services.channels.adapters import AdapterHub
    from appserver.services.context import FamilyContext

# Channels every client of this server can originate threads from.
BUILTIN_CHANNELS = ("cli", "appserver")
# System channels exist when the service behind them runs (detected by its method).
SYSTEM_CHANNELS = (
    ("cron", "cron/list"),
    ("heartbeat", "heartbeat/trigger"),
    ("automations", "automation/task/list"),
)
_CATEGORY_ORDER = {"builtin": 0, "social": 1, "system": 2, "external": 3}
REGION = "externalChannel"


def validation_failed(detail: str) -> RpcError:
    return RpcError(
        rpc_errors.EXTERNAL_CHANNEL_VALIDATION_FAILED,
        "External channel validation failed",
        {"detail": detail},
    )


def not_found(name: str) -> RpcError:
    return RpcError(rpc_errors.EXTERNAL_CHANNEL_NOT_FOUND, f"External channel not found: {name}")


def to_wire(record: ExternalChannelRecord) -> channel_wire.ExternalChannelConfig:
    return channel_wire.ExternalChannelConfig(
        name=record.name,
        enabled=record.enabled,
        transport=record.transport,
        command=record.command,
        args=record.args,
        working_directory=record.working_directory,
        env=record.env,
    )


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def to_record(channel: channel_wire.ExternalChannelConfig) -> ExternalChannelRecord:
    """Validate (``-32081``) and normalise a wire config: trimmed strings,
    blank args dropped, empty lists and maps stored as absent."""
    if _blank(channel.name):
        raise validation_failed("'channel.name' is required.")
    transport = channel.transport.strip().lower()
    if transport not in ("subprocess", "websocket"):
        raise validation_failed("'channel.transport' must be 'subprocess' or 'websocket'.")
    if transport == "subprocess":
        if _blank(channel.command):
            raise validation_failed("'channel.command' is required for subprocess transport.")
    elif (
        not _blank(channel.command)
        or channel.args
        or not _blank(channel.working_directory)
        or channel.env
    ):
        raise validation_failed("subprocess-only fields are not supported for websocket transport.")
    args = [arg.strip() for arg in channel.args or [] if arg.strip()]
    return ExternalChannelRecord(
        name=channel.name.strip(),
        enabled=channel.enabled,
        transport=transport,
        command=None if _blank(channel.command) else (channel.command or "").strip(),
        args=args or None,
        working_directory=(
            None if _blank(channel.working_directory) else (channel.working_directory or "").strip()
        ),
        env=dict(channel.env) if channel.env else None,
    )


class ChannelManagement:
    """Handlers over the repository; tells the adapter hub about config changes."""

    def __init__(self, server: FamilyContext, repo: ExternalChannelRepository, hub: AdapterHub):
        self.server = server
        self.repo = repo
        self.hub = hub

    def register(self) -> None:
        router = self.server.router
        router.register("channel/list", self.list_channels)
        router.register("channel/status", self.status)
        router.register("externalChannel/list", self.list_external)
        router.register("externalChannel/get", self.get_external)
        router.register("externalChannel/upsert", self.upsert_external)
        router.register("externalChannel/remove", self.remove_external)

    def native_channels(self) -> list[channel_wire.ChannelInfo]:
        """This server's own channel names (external channels may not take them)."""
        channels = [
            channel_wire.ChannelInfo(name=name, category="builtin") for name in BUILTIN_CHANNELS
        ]
        for name, method in SYSTEM_CHANNELS:
            if self.server.router.serves(method):
                channels.append(channel_wire.ChannelInfo(name=name, category="system"))
        return channels

    async def list_channels(self, ctx: RequestContext, params: Empty) -> BaseModel:
        channels: list[channel_wire.ChannelInfo] = []
        seen: set[str] = set()
        external = [
            channel_wire.ChannelInfo(name=r.name, category="external")
            for r in await self.repo.list()
            if r.enabled
        ]
        for info in [*self.native_channels(), *external]:
            if info.name.lower() not in seen:
                seen.add(info.name.lower())
                channels.append(info)
        channels.sort(key=lambda c: (_CATEGORY_ORDER[c.category], c.name.lower()))
        return channel_wire.ChannelListResult(channels=channels)

    async def status(self, ctx: RequestContext, params: Empty) -> BaseModel:
        # No native social channels here: only configured external ones, all of
        # them (disabled ones too), already in name order.
        return channel_wire.ChannelStatusResult(
            channels=[
                channel_wire.ChannelStatusInfo(
                    name=r.name,
                    category="external",
                    enabled=r.enabled,
                    running=self.hub.is_running(r.name),
                )
                for r in await self.repo.list()
            ]
        )

    async def list_external(self, ctx: RequestContext, params: Empty) -> BaseModel:
        return channel_wire.ExternalChannelListResult(
            channels=[to_wire(r) for r in await self.repo.list()]
        )

    async def get_external(
        self, ctx: RequestContext, params: channel_wire.ExternalChannelNameParams
    ) -> BaseModel:
        record = await self.repo.get(params.name)
        if record is None:
            raise not_found(params.name)
        return channel_wire.ExternalChannelResult(channel=to_wire(record))

    async def upsert_external(
        self, ctx: RequestContext, params: channel_wire.ExternalChannelUpsertParams
    ) -> BaseModel:
        record = to_record(params.channel)
        if any(n.name.lower() == record.name.lower() for n in self.native_channels()):
            raise RpcError(
                rpc_errors.EXTERNAL_CHANNEL_NAME_CONFLICT,
                "External channel name conflict",
                {"detail": f"'{record.name}' conflicts with a native channel name."},
            )
        await self.repo.upsert(record)
        if not record.enabled:
            self.hub.detach_all(record.name, f"Channel '{record.name}' was disabled.")
        elif record.transport != "websocket":
            self.hub.detach_all(
                record.name,
                f"Channel '{record.name}' is now subprocess-only; "
                "WebSocket adapter attach is not supported.",
            )
        self.server.announce_config_change("externalChannel/upsert", [REGION])
        return channel_wire.ExternalChannelResult(channel=to_wire(record))

    async def remove_external(
        self, ctx: RequestContext, params: channel_wire.ExternalChannelNameParams
    ) -> BaseModel:
        if not await self.repo.remove(params.name):
            raise not_found(params.name)
        self.hub.detach_all(params.name, f"Channel '{params.name}' was removed.")
        self.server.announce_config_change("externalChannel/remove", [REGION])
        return channel_wire.ExternalChannelRemoveResult(removed=True)
