"""The ``mcp/*`` handlers.

Workspace servers live in SQLite (DotCraft keeps them in
``.craft/config.json`` under ``McpServers``; the wire shapes are the same).
Plugin servers come from enabled plugins and are read-only here (``-32075``).
Every write is answered first; then the runtime reconciles (reconnecting
what changed, which produces ``mcp/status/updated`` notifications) and
``workspace/configChanged`` (regions ``mcp``) is broadcast.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

import anyio
from pydantic import BaseModel, ValidationError

from appserver.protocol import mcp as mcp_wire
from appserver.protocol.base import Empty
from appserver.protocol.errors import RpcError
from appserver.rpc.connection import RequestContext
from appserver.services.mcp.client import McpClientError, open_connection
from appserver.services.mcp.config import (
    TEST_STARTUP_TIMEOUT,
    LaunchError,
    launch_spec,
    normalise,
    not_found,
    read_only,
)
from appserver.services.mcp.effective import (
    Effective,
    PluginServerDeclaration,
    merge,
    workspace_entry,
)
from appserver.services.mcp.runtime import McpRuntime
from appserver.services.router import Router
from appserver.storage.mcp import McpServerRepository

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.mcp")

CONFIG_REGIONS = ["mcp"]
TEST_FAILED = "McpServerTestFailed"


class McpService:
    """Configuration handlers plus the runtime that keeps the servers connected."""

    def __init__(self, server: FamilyContext) -> None:
        self.server = server
        self.repo = McpServerRepository(server.db)
        self.runtime = McpRuntime(server.runtime.engine.tools, server.workspace, self._broadcast)
        # Set when the plugins family is installed: enabled plugins' servers.
        self.plugin_declarations: Callable[[], Awaitable[list[PluginServerDeclaration]]] | None = (
            None
        )
        self._refresh_lock = anyio.Lock()
        self._started = anyio.Event()

    def register(self, router: Router) -> None:
        """Serve every ``mcp/*`` method on ``router``."""
        router.register("mcp/list", self.list_servers)
        router.register("mcp/get", self.get)
        router.register("mcp/upsert", self.upsert)
        router.register("mcp/remove", self.remove)
        router.register("mcp/status/list", self.status_list)
        router.register("mcp/test", self.test)

    # --- runtime -------------------------------------------------------------------

    async def run(self) -> None:
        """Background: connect the effective servers, then keep the runtime alive."""
        self.server.trust.on_trusted.append(self.refresh)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.runtime.run)
            try:
                await self.refresh()
            finally:
                self._started.set()

    async def close(self) -> None:
        """Shutdown hook: close every session (stdio servers exit)."""
        await self.runtime.close()

    async def refresh(self, restart: Collection[str] = ()) -> None:
        """Re-read the effective list and reconcile the runtime with it (nothing
        runs in a workspace that is not trusted: its servers are its own code)."""
        async with self._refresh_lock:
            effective = await self.effective()
            trusted = self.server.trust.trusted
            await self.runtime.reconcile(effective.servers if trusted else [], restart)

    def _broadcast(self, status: mcp_wire.McpServerStatus) -> None:
        self.server.runtime.bus.publish(
            "mcp/status/updated",
            mcp_wire.McpStatusUpdatedNotification(server=status),
            broadcast=True,
        )

    # --- the effective list -----------------------------------------------------------

    async def workspace_servers(self) -> list[mcp_wire.McpServerConfig]:
        """Stored workspace servers (a row that no longer validates is skipped)."""
        configs = []
        for data in await self.repo.list():
            try:
                configs.append(normalise(mcp_wire.McpServerConfig.model_validate(data)))
            except (ValidationError, RpcError) as exc:
                log.warning("ignoring stored MCP server %r: %s", data.get("name"), exc)
        return configs

    async def effective(self) -> Effective:
        """Workspace servers plus active plugin servers."""
        declarations = await self.plugin_declarations() if self.plugin_declarations else []
        return merge(await self.workspace_servers(), declarations)

    async def _find(self, name: str) -> mcp_wire.McpServerConfig:
        server = (await self.effective()).find(name)
        if server is None:
            raise not_found(name)
        return server

    def _after_write(self, ctx: RequestContext, source: str, restart: Collection[str]) -> None:
        async def apply() -> None:
            # Reconcile first, so a client re-reading on configChanged sees the new state.
            await self.refresh(restart)
            self.server.announce_config_change(source, CONFIG_REGIONS)

        ctx.after_response(apply)

    # --- handlers -------------------------------------------------------------------

    async def list_servers(self, ctx: RequestContext, params: Empty) -> BaseModel:
        return mcp_wire.McpListResult(servers=(await self.effective()).servers)

    async def get(self, ctx: RequestContext, params: mcp_wire.McpNameParams) -> BaseModel:
        return mcp_wire.McpServerResult(server=await self._find(params.name))

    async def upsert(self, ctx: RequestContext, params: mcp_wire.McpServerParams) -> BaseModel:
        config = normalise(params.server)
        # After the first reconcile: it would otherwise pick this write up too and
        # start the server once more before the restart below.
        await self._started.wait()
        existing = (await self.effective()).find(config.name)
        if existing is not None and existing.read_only:
            raise read_only(existing.name)
        await self.repo.upsert(config.name, config.to_wire())
        self._after_write(ctx, "mcp/upsert", restart=[config.name])
        return mcp_wire.McpServerResult(server=workspace_entry(config))

    async def remove(self, ctx: RequestContext, params: mcp_wire.McpNameParams) -> BaseModel:
        await self._started.wait()
        existing = await self._find(params.name)
        if existing.read_only:
            raise read_only(existing.name)
        await self.repo.delete(existing.name)
        self._after_write(ctx, "mcp/remove", restart=())
        return mcp_wire.McpRemoveResult(removed=True)

    async def status_list(self, ctx: RequestContext, params: Empty) -> BaseModel:
        await self._started.wait()
        if not self.server.trust.trusted:
            return mcp_wire.McpStatusListResult(servers=untrusted_statuses(await self.effective()))
        return mcp_wire.McpStatusListResult(servers=self.runtime.statuses())

    async def test(self, ctx: RequestContext, params: mcp_wire.McpServerParams) -> BaseModel:
        config = normalise(params.server)
        if not config.enabled:
            return mcp_wire.McpTestResult(success=False)
        try:
            spec = launch_spec(config, self.server.workspace, os.environ, TEST_STARTUP_TIMEOUT)
            async with open_connection(spec) as connection:
                tool_count = len(connection.tools)
        except (McpClientError, LaunchError) as exc:
            return mcp_wire.McpTestResult(
                success=False, error_code=TEST_FAILED, error_message=str(exc)
            )
        return mcp_wire.McpTestResult(success=True, tool_count=tool_count)


UNTRUSTED = (
    "Not started: this workspace is not trusted, and its MCP servers are its own code. "
    "Trust it (workspace/trust or --trust-workspace) to start them."
)


def untrusted_statuses(effective: Effective) -> list[mcp_wire.McpServerStatus]:
    """What ``mcp/status/list`` says of servers held back by an untrusted workspace."""
    return [
        mcp_wire.McpServerStatus(
            name=config.name,
            enabled=config.enabled,
            startup_state="idle" if config.enabled else "disabled",
            last_error=UNTRUSTED if config.enabled else None,
            transport=config.transport,
            origin=config.origin,
            read_only=config.read_only,
        )
        for config in sorted(effective.servers, key=lambda config: config.name.lower())
    ]
