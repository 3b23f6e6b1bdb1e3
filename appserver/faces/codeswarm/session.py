"""The Codeswarm router: commands in, events out, independent of the transport.

:class:`Router` answers each command line (``inject``, ``providers_list``,
``swarm_launch`` / ``swarm_list`` / ``swarm_status`` / ``swarm_terminate``) and
runs each node's mailbox, one turn at a time, in arrival order. What it holds
(nodes, injections, swarms) is :mod:`~appserver.faces.codeswarm.state`; the
swarms are stored by :mod:`~appserver.faces.codeswarm.swarm_store`, so a restart
keeps them; a node's thread is made by :mod:`~appserver.faces.codeswarm.node_threads`;
a turn's events become router events in :mod:`~appserver.faces.codeswarm.relay`.

Every event goes to every connected client (:meth:`Router.broadcast`), as
the real router does; each client has a
:class:`~appserver.transport.peer_writer.PeerWriter` bounded in bytes (its
streamed deltas coalesce when it lags), and one that falls too far behind
is dropped, never waited for.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from appserver.faces.codeswarm.node_threads import NodeThreads
from appserver.faces.codeswarm.relay import relay
from appserver.faces.codeswarm.state import PROVIDER_ID, Injection, Node, Swarm
from appserver.faces.codeswarm.swarm_store import SwarmStore
from appserver.faces.codeswarm.wire import (
    FACE,
    Command,
    NodeInject,
    Rejected,
    event_frame,
    parse_command,
    parse_inject,
    parse_launch,
    swarm_id_of,
)
from appserver.faces.common import interrupt_quietly
from appserver.faces.seat import Seat
from appserver.protocol.ids import now_iso
from appserver.protocol.turns import TextPart
from appserver.runtime.errors import Refusal, ThreadNotFound, TurnInProgress
from appserver.runtime.host import Runtime
from appserver.runtime.turns.model import ActiveTurn
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
        self.faces = FaceRepository(runtime.db)
        self.store = SwarmStore(self.faces)
        self.threads = NodeThreads(runtime, self.faces, approval_policy)
        self.tg = tg
        self.require_timestamp = require_timestamp
        self.outboxes: set[PeerWriter] = set()
        self.nodes: dict[tuple[str, int], Node] = {}
        self.swarms: dict[str, Swarm] = {}
        self.job_swarm: dict[str, str] = {}
        self.closing = False
        self._terminating = 0  # swarm_terminate tasks under way
        self._changed = anyio.Event()

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

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _until(self, done: Callable[[], bool]) -> None:
        while True:
            changed = self._changed
            if done():
                return
            await changed.wait()

    # --- lifecycle ---------------------------------------------------------------------

    async def load(self) -> None:
        """Read the swarms a previous process stored."""
        for swarm_id, swarm in (await self.store.load()).items():
            self.swarms[swarm_id] = swarm
            self.job_swarm[swarm.job_id] = swarm_id

    async def _save_swarms(self) -> None:
        await self.store.save(self.swarms)

    def _swarm_of(self, job_id: str) -> Swarm | None:
        """The swarm of ``job_id``, if it has one."""
        swarm_id = self.job_swarm.get(job_id)
        return self.swarms[swarm_id] if swarm_id is not None else None

    def idle(self) -> bool:
        return not self._terminating and not any(node.busy for node in self.nodes.values())

    async def drain(self) -> None:
        """Wait until every accepted injection has run (stdin closed)."""
        await self._until(self.idle)

    async def shutdown(self) -> None:
        """Stop: queued injections fail, running turns are cancelled
        (``turn_complete`` status ``cancelled`` follows), workers end."""
        self.closing = True
        for node in self.nodes.values():
            self._fail_queued(node, "router shutting down")
        await self.runtime.shutdown()
        with anyio.move_on_after(SHUTDOWN_GRACE):
            await self._until(self.idle)

    # --- commands ------------------------------------------------------------------------

    async def handle_line(self, line: str) -> None:
        """Answer one command line (every outcome is at least one event)."""
        try:
            command = parse_command(line, require_timestamp=self.require_timestamp)
        except Rejected as exc:
            self.reject(exc.request_id, exc.reason)
            return
        try:
            await self.handle(command)
        except Rejected as exc:
            self.reject(exc.request_id, exc.reason)
        except Exception:
            ref = uuid.uuid4().hex[:8]
            log.exception("command %s failed (ref %s)", command.command, ref)
            self.reject(command.request_id, f"internal error (see the router's log, ref {ref})")

    async def handle(self, command: Command) -> None:
        request_id = command.request_id
        if self.closing:
            raise Rejected("router shutting down", request_id)
        if command.command == "inject":
            self.inject(command)
        elif command.command == "providers_list":
            self.broadcast(
                "providers_list", {"request_id": request_id, "providers": [self._provider()]}
            )
        elif command.command == "swarm_launch":
            await self.launch(command)
        elif command.command == "swarm_list":
            swarms = {swarm_id: swarm.listed() for swarm_id, swarm in self.swarms.items()}
            self.broadcast("swarm_list", {"request_id": request_id, "swarms": swarms})
        elif command.command == "swarm_status":
            swarm = self._swarm(command)
            await self._announce_status(request_id, swarm)
        elif command.command == "swarm_terminate":
            swarm = self._swarm(command)
            self._terminating += 1
            self.tg.start_soon(self.terminate, request_id, swarm)
        else:  # parse_command admits only COMMANDS
            raise Rejected(f"unknown command: {command.command}", request_id)

    def _provider(self) -> dict[str, Any]:
        provider = self.runtime.engine.provider
        model = provider.default_model
        return {
            "id": PROVIDER_ID,
            "label": f"appserver ({provider.name})",
            "backend": PROVIDER_ID,
            "provider_ref": PROVIDER_ID,
            "model_provider": provider.name,
            "defaults": {"model": model},
            "launch_fields": [
                {
                    "key": "model",
                    "label": "Model",
                    "type": "text",
                    "default": model,
                    "required": False,
                }
            ],
            "disabled": False,
        }

    def _swarm(self, command: Command) -> Swarm:
        swarm = self.swarms.get(swarm_id_of(command))
        if swarm is None:
            raise Rejected("unknown swarm_id", command.request_id)
        return swarm

    async def _announce_status(self, request_id: str, swarm: Swarm) -> None:
        self.broadcast("swarm_status", {"request_id": request_id, **(await self._status(swarm))})

    async def _status(self, swarm: Swarm) -> dict[str, Any]:
        # Flat values: the Codeswarm CLI prints each field with String(value).
        nodes = [self.nodes.get((swarm.job_id, node_id)) for node_id in range(swarm.node_count)]
        thread_ids = []
        for node_id, node in enumerate(nodes):
            thread_id = node.thread_id if node is not None else None
            if thread_id is None:  # not used since this process started
                thread_id = await self.faces.thread_of(FACE, f"{swarm.job_id}/{node_id}")
            thread_ids.append(thread_id)
        return {
            "swarm_id": swarm.swarm_id,
            "job_id": swarm.job_id,
            "node_count": swarm.node_count,
            "status": swarm.status,
            "thread_ids": thread_ids,
            "running_nodes": [
                node_id for node_id, node in enumerate(nodes) if node and node.current
            ],
            "queued_injections": sum(len(node.mailbox) for node in nodes if node),
        }

    # --- inject ---------------------------------------------------------------------------

    def inject(self, command: Command) -> None:
        request_id = command.request_id
        target = parse_inject(command)
        if isinstance(target, NodeInject):
            job_id, nodes = target.job_id, [target.node_id]
            swarm_id = self.job_swarm.get(job_id)
            swarm = self.swarms[swarm_id] if swarm_id is not None else None
        else:
            swarm = self.swarms.get(target.swarm_id)
            if swarm is None:
                raise Rejected("unknown swarm_id", request_id)
            job_id = swarm.job_id
            nodes = list(range(swarm.node_count)) if target.nodes == "all" else list(target.nodes)
        if swarm is not None:
            if swarm.status != "running":
                raise Rejected(f"swarm {swarm.swarm_id} is {swarm.status}", request_id)
            outside = [node_id for node_id in nodes if node_id >= swarm.node_count]
            if outside:
                raise Rejected(
                    f"node_id {outside[0]} is out of range: swarm {swarm.swarm_id} has "
                    f"{swarm.node_count} node(s)",
                    request_id,
                )
        for node_id in nodes:
            injection = Injection(
                request_id=request_id,
                injection_id=str(uuid.uuid4()),
                job_id=job_id,
                node_id=node_id,
                content=target.content,
            )
            self.broadcast("inject_ack", self._control(injection))
            node = self._node(job_id, node_id)
            node.mailbox.append(injection)
            if not node.busy:
                node.busy = True
                self.tg.start_soon(self._work, node)

    def _node(self, job_id: str, node_id: int) -> Node:
        node = self.nodes.get((job_id, node_id))
        if node is None:
            node = self.nodes[(job_id, node_id)] = Node(job_id=job_id, node_id=node_id)
        return node

    def _control(self, injection: Injection, **extra: Any) -> dict[str, Any]:
        """``data`` of inject_ack / inject_delivered / inject_failed."""
        data: dict[str, Any] = {"request_id": injection.request_id}
        data.update(self._base(injection))
        data.update(extra)
        return data

    def _base(self, injection: Injection) -> dict[str, Any]:
        """The fields every event about an injection carries."""
        data: dict[str, Any] = {
            "injection_id": injection.injection_id,
            "job_id": injection.job_id,
            "node_id": injection.node_id,
        }
        swarm_id = self.job_swarm.get(injection.job_id)
        if swarm_id is not None:
            data["swarm_id"] = swarm_id
        return data

    def _fail_queued(self, node: Node, error: str) -> None:
        while node.mailbox:
            self.broadcast("inject_failed", self._control(node.mailbox.popleft(), error=error))

    async def _work(self, node: Node) -> None:
        """Run the node's mailbox, one turn at a time."""
        try:
            while node.mailbox:
                injection = node.current = node.mailbox.popleft()
                try:
                    await self._run(node, injection)
                except Exception:
                    log.exception("injection %s failed", injection.injection_id)
                    self.broadcast(
                        "inject_failed", self._control(injection, error="internal error")
                    )
                finally:
                    node.current = None
                    node.turn_id = None
                    self._notify()
        finally:
            node.busy = False
            self._notify()

    def _stopped(self, job_id: str) -> str | None:
        """Why injections for ``job_id`` may no longer start, if they may not."""
        if self.closing:
            return "router shutting down"
        swarm_id = self.job_swarm.get(job_id)
        if swarm_id is not None and self.swarms[swarm_id].status != "running":
            return f"swarm {swarm_id} is {self.swarms[swarm_id].status}"
        return None

    async def _run(self, node: Node, injection: Injection) -> None:
        seat = Seat(FACE)
        try:
            active = await self._start(node, injection, seat)
            if active is None:
                return
            node.turn_id = active.record.id
            self.broadcast("inject_delivered", self._control(injection))
            if self._stopped(node.job_id) is not None:  # terminate or shutdown raced the start
                await self._interrupt(node)
            await relay(seat, self._base(injection), self.broadcast)
        finally:
            seat.close()

    async def _start(self, node: Node, injection: Injection, seat: Seat) -> ActiveTurn | None:
        """Start the turn; ``None`` after reporting ``inject_failed``."""
        parts = [TextPart(type="text", text=injection.content)]
        rebound = False
        while True:
            why = self._stopped(node.job_id)
            if why is not None:
                self.broadcast("inject_failed", self._control(injection, error=why))
                return None
            try:
                thread_id = await self.threads.of(node, self._swarm_of, fresh=rebound)
                return await self.runtime.turns.start(thread_id, parts, origin=seat)
            except TurnInProgress:
                # Someone else (a --websocket client) runs a turn here: queue behind it.
                other = self.runtime.engine.active.get(thread_id)
                if other is not None:
                    await other.done.wait()
            except ThreadNotFound:
                if rebound:
                    raise
                rebound = True  # the thread was deleted: give the node a new one
            except Refusal as exc:
                self.broadcast("inject_failed", self._control(injection, error=exc.message))
                return None

    async def _interrupt(self, node: Node) -> None:
        if node.thread_id is None or node.turn_id is None:
            return
        await interrupt_quietly(self.runtime, node.thread_id, node.turn_id)

    # --- swarms ------------------------------------------------------------------------------

    async def launch(self, command: Command) -> None:
        """``swarm_launch``: N threads now, one per node (see the module docstring)."""
        provider = self.runtime.engine.provider
        spec = parse_launch(command, (PROVIDER_ID,))
        swarm_id = str(uuid.uuid4())
        job_id = f"swarm-{uuid.uuid4().hex[:12]}"
        swarm = Swarm(
            swarm_id=swarm_id,
            job_id=job_id,
            node_count=spec.nodes,
            system_prompt=spec.system_prompt,
            instructions=spec.instructions,
            model=spec.model or provider.default_model,
        )
        # The threads first: the swarm is visible (and addressable) once complete.
        threads = [await self.threads.new(job_id, node_id, swarm) for node_id in range(spec.nodes)]
        self.swarms[swarm_id] = swarm
        self.job_swarm[job_id] = swarm_id
        for node_id, thread_id in enumerate(threads):
            self._node(job_id, node_id).thread_id = thread_id
        await self._save_swarms()
        self.broadcast(
            "swarm_launched",
            {
                "request_id": command.request_id,
                "swarm_id": swarm_id,
                "job_id": job_id,
                "node_count": spec.nodes,
                "provider": PROVIDER_ID,
                "provider_id": PROVIDER_ID,
                "agent_model": swarm.model,
                "thread_ids": threads,
            },
        )

    async def terminate(self, request_id: str, swarm: Swarm) -> None:
        """``swarm_terminate``: queued injections fail, running turns are
        interrupted, then ``swarm_terminated``. Threads and history stay."""
        try:
            if swarm.status == "running":
                swarm.status = "terminating"
                await self._announce_status(request_id, swarm)
                await self._save_swarms()
                mine = [node for node in self.nodes.values() if node.job_id == swarm.job_id]
                for node in mine:
                    self._fail_queued(node, f"swarm {swarm.swarm_id} terminated")
                    await self._interrupt(node)
                await self._until(lambda: not any(node.busy for node in mine))
                swarm.status = "terminated"
                swarm.terminated_at = now_iso()
                await self._save_swarms()
                swarm.ended.set()
            else:
                await self._announce_status(request_id, swarm)
                await swarm.ended.wait()
            self.broadcast(
                "swarm_terminated", {"request_id": request_id, "swarm_id": swarm.swarm_id}
            )
        except Exception:
            log.exception("terminating swarm %s failed", swarm.swarm_id)
            self.reject(request_id, "internal error while terminating")
        finally:
            self._terminating -= 1
            self._notify()
