"""The ``terminal/*`` methods (capability ``backgroundTerminals``) and installing
background terminals.

``install`` creates the workspace's :class:`~appserver.tools.terminals.TerminalManager`
(output files under ``.craft/terminals/``, records in SQLite), lets the
``shell`` tool start terminals (``run_in_background``), offers the model
``write_stdin`` and ``stop_terminal``, runs the manager for the server's life
and stops every terminal at shutdown. ``terminal/*`` notifications reach only
connections whose ``initialize.capabilities.backgroundTerminals`` is true.

Differences from DotCraft (reference §4): the records live in SQLite, not in
``.json`` files next to the output; ``terminal/cleaned`` is sent for each
terminal ``terminal/clean`` stopped (DotCraft declares it, and
``terminal/stalled``, without sending either; we never send ``stalled``);
there is no retention timer (output files stay until their thread is deleted).
As in DotCraft, archiving a thread stops its terminals and deleting it removes
their files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol import terminals as terminal_wire
from appserver.protocol.errors import RpcError
from appserver.rpc.connection import RequestContext
from appserver.runtime.events import Participant
from appserver.runtime.terminals import TerminalEvents
from appserver.services.peer import Peer
from appserver.storage.terminals import TerminalRepository
from appserver.tools.terminal_tools import attach_terminals, terminal_tools
from appserver.tools.terminals import TerminalError, TerminalManager

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


def wants_terminals(participant: Participant) -> bool:
    """A DotCraft client that declared ``capabilities.backgroundTerminals: true``."""
    return isinstance(participant, Peer) and bool(
        getattr(participant.capabilities, "background_terminals", False)
    )


def _rpc_error(exc: TerminalError) -> RpcError:
    """``-32090`` (unknown terminal), ``-32091`` (cannot write to it), else ``-32602``."""
    detail = {"detail": str(exc)}
    if exc.kind == "not_found":
        return RpcError(rpc_errors.TERMINAL_NOT_FOUND, "Background terminal not found", detail)
    if exc.kind == "not_writable":
        return RpcError(
            rpc_errors.TERMINAL_NOT_WRITABLE, "Cannot write to background terminal", detail
        )
    return rpc_errors.invalid_params(str(exc))


class TerminalHandlers:
    """Handlers of the terminal family over a :class:`TerminalManager`."""

    def __init__(self, manager: TerminalManager) -> None:
        self.manager = manager

    async def list_terminals(
        self, ctx: RequestContext, params: terminal_wire.TerminalListParams
    ) -> BaseModel:
        return terminal_wire.TerminalListResult(terminals=await self.manager.list(params.thread_id))

    async def read(
        self, ctx: RequestContext, params: terminal_wire.TerminalReadParams
    ) -> BaseModel:
        try:
            terminal = await self.manager.read(
                params.session_id, params.wait_ms, params.max_output_chars
            )
        except TerminalError as exc:
            raise _rpc_error(exc) from None
        return terminal_wire.TerminalResult(terminal=terminal)

    async def write(
        self, ctx: RequestContext, params: terminal_wire.TerminalWriteParams
    ) -> BaseModel:
        try:
            terminal = await self.manager.write(
                params.session_id, params.input, params.yield_time_ms, params.max_output_chars
            )
        except TerminalError as exc:
            raise _rpc_error(exc) from None
        return terminal_wire.TerminalResult(terminal=terminal)

    async def stop(
        self, ctx: RequestContext, params: terminal_wire.TerminalSessionParams
    ) -> BaseModel:
        try:
            terminal = await self.manager.stop(params.session_id)
        except TerminalError as exc:
            raise _rpc_error(exc) from None
        return terminal_wire.TerminalResult(terminal=terminal)

    async def clean(
        self, ctx: RequestContext, params: terminal_wire.TerminalCleanParams
    ) -> BaseModel:
        return terminal_wire.TerminalListResult(
            terminals=await self.manager.clean(params.thread_id)
        )


def install(server: FamilyContext) -> None:
    """Background terminals for the agent and the ``terminal/*`` methods."""
    runtime = server.runtime
    manager = TerminalManager(
        server.craft_dir / "terminals",
        TerminalRepository(server.db),
        TerminalEvents(runtime.bus, wants_terminals),
    )
    tools = runtime.engine.tools
    for tool in terminal_tools():
        if tool.name not in tools:
            tools.register(tool)
    attach_terminals(tools, manager)
    handlers = TerminalHandlers(manager)
    router = server.router
    router.register("terminal/list", handlers.list_terminals)
    router.register("terminal/read", handlers.read)
    router.register("terminal/write", handlers.write)
    router.register("terminal/stop", handlers.stop)
    router.register("terminal/clean", handlers.clean)
    # Archiving a thread stops its terminals; deleting it also removes their files.
    server.threads.closing_listeners.append(manager.thread_closing)
    cluster = runtime.cluster
    if cluster is not None:

        async def elsewhere(terminal: terminal_wire.BackgroundTerminal) -> bool:
            # The node of the turn that started it, if another one and alive.
            if terminal.turn_id is None:
                return False
            found = await cluster.store.turn_node(terminal.thread_id, terminal.turn_id)
            node_id = found[1] if found is not None else None
            if node_id is None or node_id == cluster.node_id:
                return False
            return node_id in await cluster.store.live_peers(cluster.silence)

        manager.elsewhere = elsewhere
    server.start_background(manager.run)
    server.shutdown_hooks.append(manager.shutdown)
