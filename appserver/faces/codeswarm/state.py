"""What the Codeswarm router holds: nodes, their injections, and swarms.

* A **node** is ``(job_id, node_id)``, bound to one thread (see
  :mod:`~appserver.faces.codeswarm.node_threads`). Each node has a mailbox:
  injections run as turns one after another, in arrival order (as the real
  router's per-node inbox).
* A **swarm** (``swarm_launch``) is a job id with N nodes, i.e. N threads
  sharing instructions and a model; :meth:`Swarm.stored` is what
  :mod:`~appserver.faces.codeswarm.swarm_store` keeps of it, :meth:`Swarm.listed`
  what ``swarm_list`` shows.

Plain records: no I/O, no runtime.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import anyio

from appserver.faces.codeswarm.handshake import PROVIDER_ID
from appserver.protocol.ids import now_iso


@dataclass
class Injection:
    request_id: str
    injection_id: str
    job_id: str
    node_id: int
    content: str
    owner: object | None = None  # the connection that sent it (TCP), if any


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


@dataclass
class SwarmIndex:
    """The swarms by id, and the swarm each job id belongs to."""

    by_id: dict[str, Swarm] = field(default_factory=dict)
    job_swarm: dict[str, str] = field(default_factory=dict)  # job id -> swarm id

    def add(self, swarm: Swarm) -> None:
        self.by_id[swarm.swarm_id] = swarm
        self.job_swarm[swarm.job_id] = swarm.swarm_id

    def of_job(self, job_id: str) -> Swarm | None:
        """The swarm of ``job_id``, if it has one."""
        swarm_id = self.job_swarm.get(job_id)
        return self.by_id[swarm_id] if swarm_id is not None else None
