"""``AppServer``: one workspace's server, composing storage, the runtime, the JSON-RPC
front door and its transports, and living from open (lock, database, recovery) through
a deferred start to the drain."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import IO, TYPE_CHECKING, Any

import anyio

from appserver import __version__, startup
from appserver.protocol.errors import INTERNAL_ERROR, RpcError
from appserver.providers import make_provider
from appserver.providers.base import close_providers
from appserver.rpc.connection import Connection
from appserver.runtime.bus import EventBus
from appserver.server.background import build_wire_models, run_logging_failure, warm_provider
from appserver.server.config import ServerConfig, provider_settings
from appserver.server.connections import Connections
from appserver.server.store import open_store
from appserver.services.advertised import advertised_capabilities
from appserver.services.router import Router
from appserver.storage.db import Database
from appserver.storage.failures import StorageFailed, disk_failure
from appserver.storage.lock import WorkspaceLock
from appserver.storage.preparation import Preparation
from appserver.storage.trust import WorkspaceTrust, settle_trust
from appserver.storage.user_settings import load_user_settings
from appserver.storage.workspace_config import (
    default_approval_policy,
    load_workspace_config,
    warn_ignored,
)
from appserver.transport.base import Transport
from appserver.transport.stdio import StdioTransport

# The runtime, the thread and turn services and the method families installed
# at start are imported when the server is built (AppServer._build), not with
# this module: a stdio server answers `initialize` first (see AppServer.open).
# The other families load at their first use (services/families.py).
if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from websockets.asyncio.server import Server

    from appserver.cron.heartbeat import HeartbeatService
    from appserver.cron.service import CronService
    from appserver.providers.base import Provider
    from appserver.runtime.approvals import ApprovalBroker
    from appserver.runtime.host import Runtime
    from appserver.runtime.threads import Threads
    from appserver.runtime.turns import TurnEngine
    from appserver.services.commands.service import CommandsService
    from appserver.services.context import FamilyContext
    from appserver.services.mcp.service import McpService
    from appserver.services.plugins.service import PluginService
    from appserver.services.skills.service import SkillsService
    from appserver.tools.registry import ToolRegistry
    from appserver.transport.early import EarlyAnswer
    from appserver.transport.early_ws import EarlyListener
    from appserver.transport.listen_options import ListenerOptions
    from appserver.transport.memory import MemoryTransport
    from appserver.transport.websocket import WebSocketTransport

log = logging.getLogger("appserver.server")

# A deferred server (AppServer.open) that no `initialize` has completed yet
# completes itself after this many seconds.
COMPLETE_WHEN_IDLE_AFTER = 0.5


class AppServer:
    """One workspace's server: open with :meth:`open`, then serve transports.

    It composes the runtime (the in-process API), the JSON-RPC front door
    (router, thread and turn handlers, the method families) and transports.
    """

    # Set by _build (at once, or for a deferred server once it completes).
    runtime: Runtime
    families: FamilyContext

    def __init__(
        self,
        config: ServerConfig,
        db: Database,
        lock: WorkspaceLock,
        tools: ToolRegistry | None = None,
        *,
        defer: bool = False,
        trust: WorkspaceTrust | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.lock = lock
        self.trust = trust or WorkspaceTrust(config.workspace, "", trusted=True, reason="given")
        self.workspace_config = load_workspace_config(config.craft_dir)
        warn_ignored(self.workspace_config)
        # The user's own settings (API key, endpoint, approval default): outside the workspace.
        self.user_settings = load_user_settings(config.workspace)
        # Settings are checked now (a bad one fails the start); the provider is
        # built with the runtime (building one never fails).
        self._settings = provider_settings(
            config, self.workspace_config, self.user_settings, trusted=self.trust.trusted
        )
        self._tools = tools
        self._bus = EventBus()
        self.router = Router(self._bus)
        self._connections = Connections(self.router, config.limits)
        self.ready = False
        self.endpoints: dict[str, str] = {}
        self._built = False
        self._deferred = defer
        # Why a deferred server could not start (its storage failed), once it is known.
        self.failure: str | None = None
        self._started: anyio.Event | None = None  # set once _start has run
        self._draining = False  # drain() began: a start not yet under way does nothing
        self._tg: TaskGroup | None = None
        if defer:
            # initialize is answered from the declared capabilities until the
            # server is complete; answering it completes the server (Router.defer).
            self.router.defer(advertised_capabilities(self.workspace_config), self.complete)
        else:
            self._build()

    def _build(self) -> None:
        """Import and compose the runtime, the thread and turn handlers and the
        method families (those that wait for their first use are only set up;
        synchronous: nothing is served meanwhile)."""
        from appserver.runtime.host import Runtime
        from appserver.services.context import FamilyContext
        from appserver.services.families import install_families
        from appserver.services.threads import ThreadService
        from appserver.services.turns import TurnService
        from appserver.tools.registry import ToolRegistry

        config = self.config
        provider = config.provider
        if provider is None:
            assert self._settings is not None
            provider = make_provider(self._settings)
        self.runtime = Runtime(
            self.db,
            config.workspace,
            provider,
            config=config.engine,
            attachments=config.craft_dir / "attachments" / "images",
            allow_private_image_urls=config.allow_private_image_urls,
            default_approval_policy=self._default_approval_policy,
            workspace_trusted=lambda: self.trust.trusted,
            tools=self._tools or ToolRegistry.with_defaults(config.tool_env),
            bus=self._bus,
            node_id=config.node_id,
        )
        runtime = self.runtime
        ThreadService(runtime.threads, lambda: runtime.subagents).register(self.router)
        turn_service = TurnService(self.runtime.turns)
        turn_service.register(self.router)
        self.families = FamilyContext(
            router=self.router,
            runtime=self.runtime,
            turn_service=turn_service,
            workspace=config.workspace,
            craft_dir=config.craft_dir,
            workspace_config=self.workspace_config,
            user_settings=self.user_settings,
            trust=self.trust,
            provider_options=config.provider_options,
            provider_fixed=config.provider is not None,
            is_draining=lambda: self._draining,
            default_approval_policy=self._default_approval_policy,
        )
        install_families(self.families)
        self._built = True

    # Short names for the parts tests and the CLI look at.
    @property
    def engine(self) -> TurnEngine:
        return self.runtime.engine

    @property
    def approvals(self) -> ApprovalBroker:
        return self.runtime.approvals

    @property
    def bus(self) -> EventBus:
        return self._bus

    @property
    def threads(self) -> Threads:
        return self.runtime.threads

    @property
    def provider(self) -> Provider:
        return self.runtime.engine.provider

    @property
    def cron(self) -> CronService | None:
        self.router.load("cron/list")  # a family that waits for its first use loads now
        return self.families.cron

    @property
    def skills(self) -> SkillsService | None:
        from appserver.services.skills import skills_of

        return skills_of(self.families)

    @property
    def plugins(self) -> PluginService | None:
        from appserver.services.plugins import plugins_of

        return plugins_of(self.families)

    @property
    def mcp(self) -> McpService | None:
        from appserver.services.mcp import mcp_of

        return mcp_of(self.families)

    @property
    def commands(self) -> CommandsService | None:
        self.router.load("command/list")  # a family that waits for its first use loads now
        from appserver.services.commands import commands_of

        return commands_of(self.families)

    @property
    def heartbeat(self) -> HeartbeatService | None:
        self.router.load("heartbeat/trigger")  # as for cron
        return self.families.heartbeat

    def _default_approval_policy(self) -> str:
        # Read on each use: workspace/config/update may replace the settings.
        return self.config.approval_policy or default_approval_policy(self.user_settings)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: ServerConfig,
        tools: ToolRegistry | None = None,
        lock_wait: float = 0.0,
        *,
        defer: bool = False,
        prepared: Preparation | None = None,
    ) -> AsyncIterator[AppServer]:
        """Lock the workspace, open the database, recover interrupted turns,
        and on exit drain: cancel turns (clients get ``turn/cancelled``),
        close connections after their outboxes flush, close the database.
        ``tools``: the agent's tools (default: every built-in tool);
        ``lock_wait``: seconds to wait for another process to leave the workspace.

        ``defer`` (the stdio server): the runtime, the thread and turn handlers
        and the method families are imported and built after the workspace is
        locked and its database open, when the first ``initialize`` has been
        answered (from the capabilities declared in services/advertised.py),
        before any later frame of that client is read; or after
        ``COMPLETE_WHEN_IDLE_AFTER`` seconds without one. Start-up errors
        (a locked workspace, a bad database or provider setting) still come
        before anything is answered.

        ``prepared``: the workspace's lock and database, already being taken
        and created in a thread (the CLI starts it before importing this module)."""
        config.workspace = config.workspace.resolve()
        async with (
            open_store(config, lock_wait, prepared) as (db, lock),
            cls._serving(config, db, lock, tools, defer) as server,
        ):
            yield server

    @classmethod
    @asynccontextmanager
    async def _serving(
        cls,
        config: ServerConfig,
        db: Database,
        lock: WorkspaceLock,
        tools: ToolRegistry | None,
        defer: bool,
    ) -> AsyncIterator[AppServer]:
        trust = await settle_trust(db, config.workspace, flag=config.trust_workspace)
        server = cls(config, db, lock, tools, defer=defer, trust=trust)
        async with anyio.create_task_group() as tg:
            server._tg = tg
            if defer:
                tg.start_soon(server._complete_when_idle)
            else:
                await server.complete()
            try:
                yield server
            finally:
                with anyio.CancelScope(shield=True):
                    await server.drain()
                tg.cancel_scope.cancel()

    async def complete(self) -> None:
        """Build the server if it is not yet (``defer``) and start the runtime
        and the families' background work; once only, later calls wait for it.

        It runs in the server's task group, so a failure ends the server as a
        failure in :meth:`open` would."""
        if self._started is None:
            self._started = anyio.Event()
            assert self._tg is not None
            self._tg.start_soon(self._start)
        await self._started.wait()

    async def _start(self) -> None:
        assert self._started is not None and self._tg is not None
        try:
            if not self._built:
                # Let what is already queued (the `initialize` response) be
                # written before the build holds the event loop.
                await anyio.sleep(0)
                if self._draining:
                    return  # shutting down before the build began: nothing to start
                self._build()
                advertised, served = self.router.capabilities(), self.router.served_capabilities()
                if served != advertised:
                    log.error(
                        "initialize advertised %s but the server serves %s: "
                        "see appserver/services/advertised.py",
                        advertised,
                        served,
                    )
            tg = self._tg
            await tg.start(self.runtime.run)
            for run in self.families.background:
                tg.start_soon(run_logging_failure, run)

            def spawn(run: Callable[[], Awaitable[Any]]) -> None:
                tg.start_soon(run_logging_failure, run)

            self.families.spawn = spawn  # a family installed from now on starts its work at once
            self.ready = True
            startup.ready()
            warm_provider(tg, self.runtime.engine.provider)
            router = self.router
            tg.start_soon(run_logging_failure, lambda: build_wire_models(router.wait_idle))
            # Only now: an `initialize` answered meanwhile still waits for all of the above.
            self.router.completed()
        except Exception as error:
            detail = disk_failure(error)
            if detail is None:
                raise
            if not self._deferred:
                raise StorageFailed(detail) from None  # nothing answered yet: fail the start
            # `initialize` was answered: the next request is told, then the server exits.
            self.failure = detail
            self.router.fail(RpcError(INTERNAL_ERROR, f"Server failed to start: {detail}"))
        finally:
            self._started.set()

    async def _complete_when_idle(self) -> None:
        """A deferred server completes itself when no ``initialize`` came
        first (its runtime recovers, its families' background work runs)."""
        await anyio.sleep(COMPLETE_WHEN_IDLE_AFTER)
        await self.complete()

    async def _shutdown(self) -> None:
        await self.runtime.shutdown()
        for hook in self.families.shutdown_hooks:
            try:
                await hook()
            except Exception:
                log.exception("shutdown hook failed")
        provider = self.runtime.engine.provider
        if provider is not self.config.provider:  # one injected is its owner's to close
            await close_providers([provider])

    async def drain(self) -> None:
        """Cancel running turns, then close every connection once its queued
        frames (the ``turn/cancelled`` among them) are written. Idempotent."""
        self._draining = True
        self.ready = False
        if self._started is not None:
            await self._started.wait()  # a start scheduled or under way finishes first
        self.ready = False
        if self._built:
            await self._shutdown()
        await self._connections.close_all()

    @property
    def connections(self) -> set[Connection]:
        """The connections being served."""
        return self._connections.open

    async def serve_transport(self, transport: Transport) -> Connection:
        """Serve one peer until it leaves."""
        return await self._connections.serve(transport)

    def connect_memory(self) -> AbstractAsyncContextManager[MemoryTransport]:
        """An in-process client end, served until the context exits (tests)."""
        return self._connections.connect_memory()

    async def serve_stdio(
        self, stdin: IO[bytes], stdout: IO[bytes], early: EarlyAnswer | None = None
    ) -> None:
        """Serve the one stdio client until EOF (``early``: what was read of its
        input and answered before the server was built). Its input ending ends the
        server: once its requests are answered, running turns are cancelled
        (``serverShutdown``) while it can still read their ends, as at SIGTERM."""
        transport = await StdioTransport.open(stdin, stdout, early=early)
        await self._connections.serve(transport, at_end_of_input=self._end_turns)

    async def _end_turns(self) -> None:
        """Cancel running turns now (each ends with ``turn/cancelled``,
        ``serverShutdown``); the rest of stopping is :meth:`drain`'s, which
        cancels again whatever this did not get to (a turn started meanwhile on
        another door, or this cut short). The server is stopping from here on:
        what a cancelled turn belonged to (an automation task, a cron run) is
        recorded as cut by a stop, as at SIGTERM, not as a failure."""
        self._draining = True
        if self._built:
            await self.runtime.shutdown()

    @asynccontextmanager
    async def listen_websocket(
        self, options: ListenerOptions, early: EarlyListener | None = None
    ) -> AsyncIterator[Server]:
        """Accept WebSocket clients while the context is open (``early``: the
        socket the command bound before the server was built, and its first
        connection, see appserver/transport/early_ws.py)."""
        # Imported here: a stdio-only server never loads the WebSocket library.
        from appserver.transport.listen_options import endpoint
        from appserver.transport.websocket import bound_port, start_listener

        async def on_connection(transport: WebSocketTransport) -> None:
            await self.serve_transport(transport)

        server = await start_listener(options, on_connection, lambda: self.ready, early=early)
        port = bound_port(server)
        self.endpoints["appServerWebSocket"] = endpoint(options, port)
        self.lock.update(
            {
                "workspacePath": str(self.config.workspace),
                "version": __version__,
                "endpoints": self.endpoints,
            }
        )
        log.debug("listening on %s", self.endpoints["appServerWebSocket"])
        try:
            yield server
        finally:
            # Cancel turns first so WebSocket clients still get turn/cancelled.
            with anyio.CancelScope(shield=True):
                await self.drain()
            server.close(close_connections=True)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await server.wait_closed()
