"""The commands the Codeswarm web backend polls every second, answered in the router's
own shapes: ``approvals_list`` (our runtime's pending approvals on the swarms' node
threads), ``queue_list`` and ``project_list`` (always empty: this router has no
inter-swarm queue and no orchestrated projects, so there is nothing to list, and an
empty answer is what the real router gives when it has none)."""

from __future__ import annotations

import time
from typing import Any

from appserver.faces.codeswarm.mailboxes import Mailboxes
from appserver.faces.codeswarm.state import SwarmIndex
from appserver.faces.codeswarm.wire import FACE
from appserver.runtime.host import Runtime
from appserver.storage.faces import FaceRepository


class PendingApprovals:
    """``approvals_list``: ``{swarm_id: {node_id: [approval, ...]}}`` plus a version
    that grows whenever the set of pending approvals changed since the last list."""

    def __init__(
        self, runtime: Runtime, faces: FaceRepository, swarms: SwarmIndex, mailboxes: Mailboxes
    ) -> None:
        self.runtime = runtime
        self.faces = faces
        self.swarms = swarms
        self.mailboxes = mailboxes
        self.version = 0
        self._listed: frozenset[str] = frozenset()  # request ids of the last list
        self._first_seen: dict[str, int] = {}  # request id -> ms since the epoch

    async def snapshot(self) -> dict[str, Any]:
        """``data`` of ``approvals_list`` (without ``request_id``)."""
        pending = dict(self.runtime.approvals.pending)  # by thread id
        approvals: dict[str, dict[str, list[dict[str, Any]]]] = {}
        if pending:
            for swarm in self.swarms.by_id.values():
                if swarm.status == "terminated":
                    continue
                for node_id in range(swarm.node_count):
                    node = self.mailboxes.nodes.get((swarm.job_id, node_id))
                    thread_id = node.thread_id if node is not None else None
                    if thread_id is None:  # not used since this process started
                        thread_id = await self.faces.thread_of(FACE, f"{swarm.job_id}/{node_id}")
                    question = pending.get(thread_id) if thread_id is not None else None
                    if question is None or question.decision is not None:
                        continue
                    current = node.current if node is not None else None
                    entry = self._entry(swarm.job_id, question.params, current)
                    approvals.setdefault(swarm.swarm_id, {})[str(node_id)] = [entry]
        listed = frozenset(
            entry["approval_id"]
            for nodes in approvals.values()
            for entries in nodes.values()
            for entry in entries
        )
        if listed != self._listed:
            self.version += 1
            self._listed = listed
            self._first_seen = {key: self._first_seen.get(key, _now_ms()) for key in listed}
        return {"approvals_version": self.version, "approvals": approvals}

    def _entry(self, job_id: str, params: Any, current: Any) -> dict[str, Any]:
        created = self._first_seen.get(params.request_id) or _now_ms()
        self._first_seen[params.request_id] = created
        shell = params.approval_type == "shell"
        return {
            "job_id": job_id,
            "approval_id": params.request_id,
            "approval_status": "pending",
            "call_id": params.request_id,
            "injection_id": current.injection_id if current is not None else None,
            "turn_id": params.turn_id,
            "command": params.operation if shell else f"{params.operation} {params.target}",
            "reason": params.reason,
            "cwd": params.target if shell else None,
            "proposed_execpolicy_amendment": None,
            "available_decisions": None,
            "created_at_ms": created,
            "updated_at_ms": created,
        }


def _now_ms() -> int:
    return int(time.time() * 1000)
