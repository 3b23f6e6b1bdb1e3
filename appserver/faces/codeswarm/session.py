"""The Codeswarm router's state and behaviour, independent of the transport.

* A **node** is ``(job_id, node_id)``, bound to one thread through
  :class:`~appserver.storage.faces.FaceRepository` (key ``"<job_id>/<node_id>"``),
  made on first use. Each node has a mailbox: injections run as turns one
  after another, in arrival order (as the real router's per-node inbox).
* A **swarm** (``swarm_launch``) is a job id with N nodes, i.e. N threads
  sharing instructions and a model; swarms are kept in memory and stored as
  one JSON document among the face's replies, so a restart keeps them.
* Every event goes to every connected client (:meth:`Router.broadcast`), as
  the real router does; each client has a
  :class:`~appserver.transport.peer_writer.PeerWriter` bounded in bytes (its
  streamed deltas coalesce when it lags), and one that falls too far behind
  is dropped, never waited for.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

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
from appserver.protocol.threads import Item, TokenUsage
from appserver.protocol.turns import (
    DeltaNotification,
    ItemNotification,
    TextPart,
    TurnCancelledNotification,
    TurnFailedNotification,
    TurnNotification,
)
from appserver.runtime.errors import Refusal, ThreadNotFound, TurnInProgress
from appserver.runtime.events import Event
from appserver.runtime.host import Runtime
from appserver.runtime.threads import NewThread
from appserver.runtime.turns.model import ActiveTurn
from appserver.storage.faces import FaceRepository
from appserver.transport.outbox import text_merger
from appserver.transport.peer_writer import PeerWriter

log = logging.getLogger("appserver.faces.codeswarm")

PROVIDER_ID = "appserver"
SWARMS_KEY = "swarms"  # the face reply that stores every swarm
SHUTDOWN_GRACE = 10.0  # seconds turns get to end once cancelled at shutdown
# Streamed text a lagging client may get in fewer, larger events.
_DELTAS = frozenset({"assistant_delta", "reasoning_delta"})
_MERGE_DELTAS = text_merger("data", "content")


@dataclass
class Injection:
    request_id: str
    injection_id: str
    job_id: str
    node_id: int
    content: str


@dataclass
class Swarm:
    swarm_id: str
    job_id: str
    node_count: int
    system_prompt: str
    instructions: list[str]
    model: str
    status: str = "running"  # running | terminating | terminated
    created_at: str = field(default_factory=now_iso)
    terminated_at: str | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)

    def stored(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "node_count": self.node_count,
            "system_prompt": self.system_prompt,
            "instructions": self.instructions,
            "model": self.model,
            "status": self.status,
            "created_at": self.created_at,
            "terminated_at": self.terminated_at,
        }

    def listed(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "job_id": self.job_id,
            "node_count": self.node_count,
            "system_prompt": self.system_prompt,
            "status": self.status,
            "provider": PROVIDER_ID,
            "provider_id": PROVIDER_ID,
            "agent_model": self.model,
            "created_at": self.created_at,
        }
        if self.terminated_at is not None:
            entry["terminated_at"] = self.terminated_at
        return entry


@dataclass
class Node:
    job_id: str
    node_id: int
    mailbox: deque[Injection] = field(default_factory=deque)
    busy: bool = False  # a worker is draining the mailbox
    thread_id: str | None = None
    current: Injection | None = None
    turn_id: str | None = None  # the running turn of ``current``, once started

    @property
    def key(self) -> str:
        return f"{self.job_id}/{self.node_id}"


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
        self.tg = tg
        self.approval_policy = approval_policy
        self.require_timestamp = require_timestamp
        self.outboxes: set[PeerWriter] = set()
        self.nodes: dict[tuple[str, int], Node] = {}
        self.swarms: dict[str, Swarm] = {}
        self.job_swarm: dict[str, str] = {}
        self.closing = False
        self._terminating = 0  # swarm_terminate tasks under way
        self._save_lock = anyio.Lock()
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
        stored = await self.faces.reply(FACE, SWARMS_KEY)
        if stored is None:
            return
        try:
            swarms = json.loads(stored[0])
        except ValueError:
            log.error("ignoring unreadable stored swarms")
            return
        for swarm_id, entry in swarms.items() if isinstance(swarms, dict) else ():
            try:
                swarm = Swarm(
                    swarm_id=swarm_id,
                    job_id=str(entry["job_id"]),
                    node_count=int(entry["node_count"]),
                    system_prompt=str(entry.get("system_prompt", "")),
                    instructions=[str(text) for text in entry.get("instructions", [])],
                    model=str(entry.get("model", "")),
                    status=str(entry.get("status", "running")),
                    created_at=str(entry.get("created_at") or now_iso()),
                    terminated_at=entry.get("terminated_at"),
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                log.error("ignoring unreadable stored swarm %s", swarm_id)
                continue
            if swarm.status == "terminating":  # the process ended mid-way
                swarm.status = "terminated"
                swarm.terminated_at = swarm.terminated_at or now_iso()
            if swarm.status == "terminated":
                swarm.ended.set()
            self.swarms[swarm_id] = swarm
            self.job_swarm[swarm.job_id] = swarm_id

    async def _save_swarms(self) -> None:
        async with self._save_lock:  # saves land in order: the last one is the newest
            document = {swarm_id: swarm.stored() for swarm_id, swarm in self.swarms.items()}
            await self.faces.store_reply(FACE, SWARMS_KEY, json.dumps(document), now_iso())

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
            await self._relay(seat, injection)
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
                thread_id = await self._thread(node, fresh=rebound)
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

    async def _thread(self, node: Node, fresh: bool = False) -> str:
        """The node's thread, made (and bound) on first use."""
        if node.thread_id is not None and not fresh:
            return node.thread_id
        thread_id = None if fresh else await self.faces.thread_of(FACE, node.key)
        if thread_id is None:
            swarm_id = self.job_swarm.get(node.job_id)
            swarm = self.swarms[swarm_id] if swarm_id is not None else None
            thread_id = await self._new_thread(node.job_id, node.node_id, swarm)
        node.thread_id = thread_id
        return thread_id

    async def _new_thread(self, job_id: str, node_id: int, swarm: Swarm | None) -> str:
        key = f"{job_id}/{node_id}"
        configuration: dict[str, Any] = {}
        if self.approval_policy:
            configuration["approvalPolicy"] = self.approval_policy
        if swarm is not None:
            if swarm.instructions:
                configuration["agentInstructions"] = "\n\n".join(swarm.instructions)
            if swarm.model:
                configuration["model"] = swarm.model
        thread = await self.runtime.threads.create(
            NewThread(
                user_id=FACE,
                channel_name=FACE,
                channel_context=key,
                display_name=f"codeswarm {key}",
                configuration=configuration or None,
            )
        )
        await self.faces.bind(FACE, key, thread.id, now_iso())
        return thread.id

    async def _interrupt(self, node: Node) -> None:
        if node.thread_id is None or node.turn_id is None:
            return
        await interrupt_quietly(self.runtime, node.thread_id, node.turn_id)

    async def _relay(self, seat: Seat, injection: Injection) -> None:
        """Translate the turn's events until its terminal one."""
        base = self._base(injection)
        error_code = "turn_failed"
        while True:
            event = await seat.next_event()
            kind, params = event.kind, event.params
            if kind == "turn/started" and isinstance(params, TurnNotification):
                self.broadcast(
                    "turn_started",
                    {**base, "thread_id": params.turn.thread_id, "turn_id": params.turn.id},
                )
            elif kind == "item/agentMessage/delta" and isinstance(params, DeltaNotification):
                self.broadcast("assistant_delta", {**base, "content": params.delta})
            elif kind == "item/reasoning/delta" and isinstance(params, DeltaNotification):
                self.broadcast("reasoning_delta", {**base, "content": params.delta})
            elif kind == "item/completed" and isinstance(params, ItemNotification):
                error_code = self._item(params.item, base) or error_code
            elif kind in ("turn/completed", "turn/failed", "turn/cancelled"):
                self._finish(event, base, error_code)
                return

    def _item(self, item: Item, base: dict[str, Any]) -> str | None:
        """Events for a completed item; an error item's code is returned."""
        payload = item.payload
        if item.type == "agentMessage" and payload.get("text"):
            self.broadcast("assistant", {**base, "content": str(payload["text"])})
        elif item.type == "reasoningContent" and payload.get("text"):
            self.broadcast("reasoning", {**base, "content": str(payload["text"])})
        elif item.type == "toolCall":
            arguments = payload.get("arguments")
            self.broadcast(
                "tool_call",
                {
                    **base,
                    "call_id": str(payload.get("callId", "")),
                    "tool": str(payload.get("toolName", "")),
                    "arguments": arguments if isinstance(arguments, dict) else {},
                },
            )
        elif item.type == "toolResult":
            self.broadcast(
                "tool_result",
                {
                    **base,
                    "call_id": str(payload.get("callId", "")),
                    "success": bool(payload.get("success")),
                    "result": str(payload.get("result", "")),
                },
            )
        elif item.type == "error":
            return str(payload.get("code") or "turn_failed")
        return None

    def _finish(self, event: Event, base: dict[str, Any], error_code: str) -> None:
        params = event.params
        status = "completed"
        extra: dict[str, Any] = {}
        if isinstance(params, TurnFailedNotification):
            status = "failed"
            self.broadcast(
                "agent_error", {**base, "message": params.error, "error_code": error_code}
            )
        elif isinstance(params, TurnCancelledNotification):
            status = "cancelled"
            extra["reason"] = params.reason
        assert isinstance(
            params, TurnNotification | TurnFailedNotification | TurnCancelledNotification
        )
        usage = params.turn.token_usage or TokenUsage()
        self.broadcast(
            "usage",
            {
                **base,
                "total_tokens": usage.total_tokens,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            },
        )
        self.broadcast(
            "turn_complete",
            {
                **base,
                "thread_id": params.turn.thread_id,
                "turn_id": params.turn.id,
                "status": status,
                **extra,
            },
        )

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
        threads = [await self._new_thread(job_id, node_id, swarm) for node_id in range(spec.nodes)]
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
