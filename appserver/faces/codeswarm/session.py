"""The Codeswarm router, its first job: commands in, events out, independent of the
transport.

:class:`Router` answers each command line (``inject``, ``providers_list``,
``swarm_launch`` / ``swarm_list`` / ``swarm_status`` / ``swarm_terminate``, and the
polled ``approvals_list`` / ``queue_list`` / ``project_list`` of
:mod:`~appserver.faces.codeswarm.polled`) and sends
every event to every connected client (:meth:`Router.broadcast`), as the real router
does; each client has a :class:`~appserver.transport.peer_writer.PeerWriter` bounded in
bytes (its streamed deltas coalesce when it lags), and one that falls too far behind
is dropped, never waited for. Its other two jobs have rooms of their own: running each
node's mailbox, one turn at a time, in arrival order
(:mod:`~appserver.faces.codeswarm.mailboxes`), and launching, describing and
terminating swarms (:mod:`~appserver.faces.codeswarm.swarms`). What it holds (nodes,
injections, swarms) is :mod:`~appserver.faces.codeswarm.state`; a node's thread is
made by :mod:`~appserver.faces.codeswarm.node_threads`.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio
from anyio.abc import TaskGroup

from appserver.faces.codeswarm.handshake import provider_entry
from appserver.faces.codeswarm.mailboxes import Mailboxes
from appserver.faces.codeswarm.node_threads import NodeThreads
from appserver.faces.codeswarm.polled import PendingApprovals
from appserver.faces.codeswarm.state import Swarm, SwarmIndex
from appserver.faces.codeswarm.swarms import SwarmControl
from appserver.faces.codeswarm.wire import (
    Command,
    Rejected,
    event_frame,
    parse_command,
    swarm_id_of,
)
from appserver.runtime.host import Runtime
from appserver.storage.faces import FaceRepository
from appserver.transport.outbox import text_merger
from appserver.transport.peer_writer import PeerWriter

log = logging.getLogger("appserver.faces.codeswarm")

SHUTDOWN_GRACE = 10.0  # seconds turns get to end once cancelled at shutdown
# Streamed text a lagging client may get in fewer, larger events.
_DELTAS = frozenset({"assistant_delta", "reasoning_delta"})
_MERGE_DELTAS = text_merger("data", "content")


class Router:
    """Commands in (:meth:`handle_line`), events out (:meth:`broadcast`)."""

    def __init__(
        self,
        runtime: Runtime,
        tg: TaskGroup,
        *,
        approval_policy: str | None = None,
        require_timestamp: bool = True,
    ) -> None:
        self.runtime = runtime
        faces = FaceRepository(runtime.db)
        threads = NodeThreads(runtime, faces, approval_policy)
        self.require_timestamp = require_timestamp
        self.outboxes: set[PeerWriter] = set()
        self.swarms = SwarmIndex()
        self.mailboxes = Mailboxes(runtime, tg, threads, self.swarms, self.broadcast)
        self.swarm_control = SwarmControl(
            runtime, tg, faces, threads, self.swarms, self.mailboxes, self.broadcast, self.reject
        )
        self.approvals = PendingApprovals(runtime, faces, self.swarms, self.mailboxes)

    # --- clients and events ----------------------------------------------------------

    def broadcast(self, event: str, data: dict[str, Any]) -> None:
        """Send one event to every connected client."""
        frame = event_frame(event, data)
        coalesce = None
        if event in _DELTAS:
            key = (event, data.get("job_id"), data.get("node_id"), data.get("injection_id"))
            coalesce = key, _MERGE_DELTAS
        for outbox in list(self.outboxes):
            outbox.put(frame, coalesce)

    def reject(self, request_id: str | None, reason: str) -> None:
        self.broadcast("command_rejected", {"request_id": request_id, "reason": reason})

    # --- lifecycle ---------------------------------------------------------------------

    async def load(self) -> None:
        """Read the swarms a previous process stored."""
        await self.swarm_control.load()

    def idle(self) -> bool:
        return not self.swarm_control.terminating and not self.mailboxes.busy()

    async def settled(self, owner: object) -> None:
        """Wait until what ``owner`` (a connection) asked for is answered: its
        injections have run and its ``swarm_terminate`` commands are done."""
        control = self.swarm_control
        await self.mailboxes.until(
            lambda: not control.terminating_for[owner] and not self.mailboxes.runs_for(owner)
        )

    async def drain(self) -> None:
        """Wait until every accepted injection has run (stdin closed)."""
        await self.mailboxes.until(self.idle)

    async def shutdown(self) -> None:
        """Stop: queued injections fail, running turns are cancelled
        (``turn_complete`` status ``cancelled`` follows), workers end."""
        self.mailboxes.closing = True
        for node in self.mailboxes.nodes.values():
            self.mailboxes.fail_queued(node, "router shutting down")
        await self.runtime.shutdown()
        with anyio.move_on_after(SHUTDOWN_GRACE):
            await self.mailboxes.until(self.idle)

    # --- commands ------------------------------------------------------------------------

    async def handle_line(self, line: str, owner: object = None) -> None:
        """Answer one command line (every outcome is at least one event); ``owner``
        is the connection that sent it (see :meth:`settled`)."""
        try:
            command = parse_command(line, require_timestamp=self.require_timestamp)
        except Rejected as exc:
            self.reject(exc.request_id, exc.reason)
            return
        try:
            await self.handle(command, owner)
        except Rejected as exc:
            self.reject(exc.request_id, exc.reason)
        except Exception:
            ref = uuid.uuid4().hex[:8]
            log.exception("command %s failed (ref %s)", command.command, ref)
            self.reject(command.request_id, f"internal error (see the router's log, ref {ref})")

    async def handle(self, command: Command, owner: object = None) -> None:
        request_id = command.request_id
        if self.mailboxes.closing:
            raise Rejected("router shutting down", request_id)
        if command.command == "inject":
            self.mailboxes.inject(command, owner)
        elif command.command == "providers_list":
            self.broadcast(
                "providers_list", {"request_id": request_id, "providers": [self._provider()]}
            )
        elif command.command == "swarm_launch":
            await self.swarm_control.launch(command)
        elif command.command == "swarm_list":
            swarms = self.swarm_control.listed()
            self.broadcast("swarm_list", {"request_id": request_id, "swarms": swarms})
        elif command.command == "swarm_status":
            swarm = self._swarm(command)
            await self.swarm_control.announce_status(request_id, swarm)
        elif command.command == "swarm_terminate":
            swarm = self._swarm(command)
            await self.swarm_control.start_terminating(request_id, swarm, owner)
        elif command.command == "approvals_list":
            snapshot = await self.approvals.snapshot()
            self.broadcast("approvals_list", {"request_id": request_id, **snapshot})
        elif command.command == "queue_list":  # no inter-swarm queue here: always empty
            self.broadcast("queue_list", {"request_id": request_id, "items": []})
        elif command.command == "project_list":  # no orchestrated projects here
            self.broadcast("project_list", {"request_id": request_id, "projects": {}})
        else:  # parse_command admits only COMMANDS
            raise Rejected(f"unknown command: {command.command}", request_id)

    def _provider(self) -> dict[str, Any]:
        provider = self.runtime.engine.provider
        return provider_entry(provider.name, provider.default_model)

    def _swarm(self, command: Command) -> Swarm:
        swarm = self.swarms.by_id.get(swarm_id_of(command))
        if swarm is None:
            raise Rejected("unknown swarm_id", command.request_id)
        return swarm
