"""Node mailboxes, the Codeswarm router's second job: an ``inject`` becomes one
injection per addressed node, queued in that node's mailbox and run as a turn on the
node's thread, one at a time, in arrival order; each injection's ack, delivery or
failure is an event, and the turn's own events are relayed
(:mod:`~appserver.faces.codeswarm.relay`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from appserver.faces.codeswarm.node_threads import NodeThreads
from appserver.faces.codeswarm.relay import relay
from appserver.faces.codeswarm.state import Injection, Node, SwarmIndex
from appserver.faces.codeswarm.wire import FACE, Command, NodeInject, Rejected, parse_inject
from appserver.faces.common import interrupt_quietly, wait_out_turn
from appserver.faces.seat import Seat
from appserver.runtime.errors import Refusal, ThreadNotFound, TurnInProgress
from appserver.runtime.host import Runtime
from appserver.runtime.turns.model import ActiveTurn

log = logging.getLogger("appserver.faces.codeswarm")

#: Sends one event to every connected client (``Router.broadcast``).
Broadcast = Callable[[str, dict[str, Any]], None]


class Mailboxes:
    """Every node's mailbox and the worker that drains it."""

    def __init__(
        self,
        runtime: Runtime,
        tg: TaskGroup,
        threads: NodeThreads,
        swarms: SwarmIndex,
        broadcast: Broadcast,
    ) -> None:
        self.runtime = runtime
        self.tg = tg
        self.threads = threads
        self.swarms = swarms
        self.broadcast = broadcast
        self.nodes: dict[tuple[str, int], Node] = {}
        self.closing = False  # the router is shutting down: no injection starts
        self._changed = anyio.Event()

    def notify(self) -> None:
        """Wake whoever waits in :meth:`until` (a worker or a termination ended)."""
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, done: Callable[[], bool]) -> None:
        """Return once ``done()`` holds, checked after each :meth:`notify`."""
        while True:
            changed = self._changed
            if done():
                return
            await changed.wait()

    def busy(self) -> bool:
        """Whether any node still has injections to run."""
        return any(node.busy for node in self.nodes.values())

    def inject(self, command: Command, owner: object | None = None) -> None:
        """``inject``: queue the content for each node it addresses (``inject_ack`` each);
        ``owner`` is the connection that sent it (see :meth:`runs_for`)."""
        request_id = command.request_id
        target = parse_inject(command)
        if isinstance(target, NodeInject):
            job_id, nodes = target.job_id, [target.node_id]
            swarm = self.swarms.of_job(job_id)
        else:
            swarm = self.swarms.by_id.get(target.swarm_id)
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
                owner=owner,
            )
            self.broadcast("inject_ack", self._control(injection))
            node = self.node(job_id, node_id)
            node.mailbox.append(injection)
            if not node.busy:
                node.busy = True
                self.tg.start_soon(self._work, node)

    def runs_for(self, owner: object) -> bool:
        """Whether an injection ``owner`` sent is still queued or running."""
        return any(
            (node.current is not None and node.current.owner is owner)
            or any(injection.owner is owner for injection in node.mailbox)
            for node in self.nodes.values()
        )

    def node(self, job_id: str, node_id: int) -> Node:
        """The node ``(job_id, node_id)``, made on first use."""
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
        swarm_id = self.swarms.job_swarm.get(injection.job_id)
        if swarm_id is not None:
            data["swarm_id"] = swarm_id
        return data

    def fail_queued(self, node: Node, error: str) -> None:
        """Fail the injections still waiting in the node's mailbox (``inject_failed``)."""
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
                    self.notify()
        finally:
            node.busy = False
            self.notify()

    def _stopped(self, job_id: str) -> str | None:
        """Why injections for ``job_id`` may no longer start, if they may not."""
        if self.closing:
            return "router shutting down"
        swarm = self.swarms.of_job(job_id)
        if swarm is not None and swarm.status != "running":
            return f"swarm {swarm.swarm_id} is {swarm.status}"
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
                await self.interrupt(node)
            await relay(seat, self._base(injection), self.broadcast)
        finally:
            seat.close()

    async def _start(self, node: Node, injection: Injection, seat: Seat) -> ActiveTurn | None:
        """Start the turn; ``None`` after reporting ``inject_failed``."""
        parts = [{"type": "text", "text": injection.content}]  # as data: no model (inputs.py)
        rebound = False
        while True:
            why = self._stopped(node.job_id)
            if why is not None:
                self.broadcast("inject_failed", self._control(injection, error=why))
                return None
            try:
                thread_id = await self.threads.of(node, self.swarms.of_job, fresh=rebound)
                return await self.runtime.turns.start(thread_id, parts, origin=seat)
            except TurnInProgress:
                # Someone else (a --websocket client) runs a turn here: queue behind it.
                await wait_out_turn(self.runtime, thread_id)
            except ThreadNotFound:
                if rebound:
                    raise
                rebound = True  # the thread was deleted: give the node a new one
            except Refusal as exc:
                self.broadcast("inject_failed", self._control(injection, error=exc.message))
                return None

    async def interrupt(self, node: Node) -> None:
        """Interrupt the node's running turn, if it has one."""
        if node.thread_id is None or node.turn_id is None:
            return
        await interrupt_quietly(self.runtime, node.thread_id, node.turn_id)
