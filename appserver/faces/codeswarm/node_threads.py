"""A Codeswarm node's thread: made and bound on first use.

Each node ``(job_id, node_id)`` is bound to one thread through
:class:`~appserver.storage.faces.FaceRepository` (key ``"<job_id>/<node_id>"``).
The thread is made on the node's first injection (or by ``swarm_launch``) with
the face as its channel, the node's key as its context, the ``--approval-policy``
if given, and its swarm's instructions and model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appserver.faces.codeswarm.state import Node, Swarm
from appserver.faces.codeswarm.wire import FACE
from appserver.protocol.ids import now_iso
from appserver.runtime.host import Runtime
from appserver.runtime.threads import NewThread
from appserver.storage.faces import FaceRepository


class NodeThreads:
    """Finds, makes and binds the threads of nodes."""

    def __init__(
        self, runtime: Runtime, faces: FaceRepository, approval_policy: str | None
    ) -> None:
        self.runtime = runtime
        self.faces = faces
        self.approval_policy = approval_policy

    async def of(
        self, node: Node, swarm_of: Callable[[str], Swarm | None], fresh: bool = False
    ) -> str:
        """The node's thread, made (and bound) on first use; ``fresh``: a new one.
        ``swarm_of`` gives the swarm of a job id, if it has one."""
        if node.thread_id is not None and not fresh:
            return node.thread_id
        seen = await self.faces.thread_of(FACE, node.key)
        thread_id = None if fresh else seen
        if thread_id is None:
            thread_id = await self.new(
                node.job_id, node.node_id, swarm_of(node.job_id), replacing=seen
            )
        node.thread_id = thread_id
        return thread_id

    async def new(
        self, job_id: str, node_id: int, swarm: Swarm | None, replacing: str | None = None
    ) -> str:
        """A new thread for the node, bound to it in place of ``replacing`` (the
        thread seen bound, if any); its id, or the thread another process bound
        to the node meanwhile (the new one is then deleted)."""
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
        bound = await self.faces.claim(FACE, key, thread.id, now_iso(), replacing=replacing)
        if bound != thread.id:
            await self.runtime.threads.delete(thread.id)
        return bound
