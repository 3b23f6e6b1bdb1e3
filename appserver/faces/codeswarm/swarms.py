"""Swarms, the Codeswarm router's third job: ``swarm_launch`` (a thread per node, made
at once), ``swarm_list`` (live swarms only), ``swarm_status`` and ``swarm_terminate``
(queued injections fail, running turns are interrupted, ``swarm_terminated`` then
``swarm_removed``; threads and history stay), kept across restarts
by :mod:`~appserver.faces.codeswarm.swarm_store`."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from anyio.abc import TaskGroup

from appserver.faces.codeswarm.handshake import PROVIDER_ID
from appserver.faces.codeswarm.mailboxes import Broadcast, Mailboxes
from appserver.faces.codeswarm.node_threads import NodeThreads
from appserver.faces.codeswarm.state import Swarm, SwarmIndex
from appserver.faces.codeswarm.swarm_store import SwarmStore
from appserver.faces.codeswarm.wire import FACE, Command, parse_launch
from appserver.protocol.ids import now_iso
from appserver.runtime.host import Runtime
from appserver.storage.faces import FaceRepository

log = logging.getLogger("appserver.faces.codeswarm")


class SwarmControl:
    """Launching, describing and terminating swarms."""

    def __init__(
        self,
        runtime: Runtime,
        tg: TaskGroup,
        faces: FaceRepository,
        threads: NodeThreads,
        swarms: SwarmIndex,
        mailboxes: Mailboxes,
        broadcast: Broadcast,
        reject: Callable[[str | None, str], None],
    ) -> None:
        self.runtime = runtime
        self.tg = tg
        self.faces = faces
        self.store = SwarmStore(faces)
        self.threads = threads
        self.swarms = swarms
        self.mailboxes = mailboxes
        self.broadcast = broadcast
        self.reject = reject
        self.terminating = 0  # swarm_terminate tasks under way
        self.terminating_for: Counter[object] = Counter()  # ... by the connection that asked

    async def load(self) -> None:
        """Read the swarms a previous process stored."""
        for swarm in (await self.store.load()).values():
            self.swarms.add(swarm)

    async def _save(self) -> None:
        await self.store.save(self.swarms.by_id)

    def listed(self) -> dict[str, Any]:
        """``swarms`` of ``swarm_list``: the live ones. A terminated swarm is pruned
        from the list once ``swarm_terminated`` is out (as the Codeswarm router removes
        a user-terminated swarm at once): the web backend takes ``swarm_list`` as the
        whole truth and would show it again. It is still known by id, so
        ``swarm_status`` answers and ``inject`` is refused, not run."""
        return {
            swarm_id: swarm.listed()
            for swarm_id, swarm in self.swarms.by_id.items()
            if swarm.status != "terminated"
        }

    async def announce_status(self, request_id: str, swarm: Swarm) -> None:
        """``swarm_status``."""
        self.broadcast("swarm_status", {"request_id": request_id, **(await self._status(swarm))})

    async def _status(self, swarm: Swarm) -> dict[str, Any]:
        # Flat values: the Codeswarm CLI prints each field with String(value).
        nodes = [
            self.mailboxes.nodes.get((swarm.job_id, node_id)) for node_id in range(swarm.node_count)
        ]
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

    async def launch(self, command: Command) -> None:
        """``swarm_launch``: N threads now, one per node."""
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
        self.swarms.add(swarm)
        for node_id, thread_id in enumerate(threads):
            self.mailboxes.node(job_id, node_id).thread_id = thread_id
        await self._save()
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

    async def start_terminating(self, request_id: str, swarm: Swarm, owner: object = None) -> None:
        """``swarm_terminate``: the swarm is ``terminating`` (answered) before the
        next command is read, so a ``swarm_status`` or ``inject`` sent after it
        sees it so; the rest runs beside the next commands (it waits for turns).
        ``owner`` is the connection that asked."""
        self.terminating += 1
        self.terminating_for[owner] += 1
        began = swarm.status == "running"
        try:
            if began:
                swarm.status = "terminating"
                await self.announce_status(request_id, swarm)
                await self._save()
        except BaseException:
            self._done_terminating(owner)
            raise
        self.tg.start_soon(self.terminate, request_id, swarm, owner, began)

    async def terminate(
        self, request_id: str, swarm: Swarm, owner: object = None, began: bool = False
    ) -> None:
        """Queued injections fail, running turns are interrupted, then
        ``swarm_terminated``. Threads and history stay. ``began``: this
        terminate turned the swarm to ``terminating`` (a repeated one only waits)."""
        mailboxes = self.mailboxes
        pruned = False  # this call ended the swarm (a repeated terminate only waits)
        try:
            if began:
                mine = [node for node in mailboxes.nodes.values() if node.job_id == swarm.job_id]
                for node in mine:
                    mailboxes.fail_queued(node, f"swarm {swarm.swarm_id} terminated")
                    await mailboxes.interrupt(node)
                await mailboxes.until(lambda: not any(node.busy for node in mine))
                swarm.status = "terminated"
                swarm.terminated_at = now_iso()
                await self._save()
                swarm.ended.set()
                pruned = True
            else:
                await self.announce_status(request_id, swarm)
                await swarm.ended.wait()
            self.broadcast(
                "swarm_terminated", {"request_id": request_id, "swarm_id": swarm.swarm_id}
            )
            if pruned:
                # Gone from swarm_list now; said the way the Codeswarm router says a
                # swarm left its list (clients that missed swarm_terminated drop it).
                self.broadcast(
                    "swarm_removed", {"swarm_id": swarm.swarm_id, "reason": "terminated"}
                )
        except Exception:
            log.exception("terminating swarm %s failed", swarm.swarm_id)
            self.reject(request_id, "internal error while terminating")
        finally:
            self._done_terminating(owner)

    def _done_terminating(self, owner: object) -> None:
        self.terminating -= 1
        self.terminating_for[owner] -= 1
        if not self.terminating_for[owner]:
            del self.terminating_for[owner]
        self.mailboxes.notify()
