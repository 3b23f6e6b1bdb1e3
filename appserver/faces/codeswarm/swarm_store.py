"""The swarms a router keeps across restarts: one JSON document among the face's replies.

:meth:`SwarmStore.load` reads what a previous process stored (a swarm it left
``terminating`` is ``terminated`` now; unreadable entries are logged and skipped);
:meth:`SwarmStore.save` writes every swarm, saves landing in order.
"""

from __future__ import annotations

import json
import logging

import anyio

from appserver.faces.codeswarm.state import Swarm
from appserver.faces.codeswarm.wire import FACE
from appserver.protocol.ids import now_iso
from appserver.storage.faces import FaceRepository

log = logging.getLogger("appserver.faces.codeswarm")

SWARMS_KEY = "swarms"  # the face reply that stores every swarm


class SwarmStore:
    """Reads and writes the stored swarms through the face's :class:`FaceRepository`."""

    def __init__(self, faces: FaceRepository) -> None:
        self.faces = faces
        self._save_lock = anyio.Lock()

    async def load(self) -> dict[str, Swarm]:
        """The swarms a previous process stored, by swarm id."""
        loaded: dict[str, Swarm] = {}
        stored = await self.faces.reply(FACE, SWARMS_KEY)
        if stored is None:
            return loaded
        try:
            swarms = json.loads(stored[0])
        except ValueError:
            log.error("ignoring unreadable stored swarms")
            return loaded
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
            loaded[swarm_id] = swarm
        return loaded

    async def save(self, swarms: dict[str, Swarm]) -> None:
        """Store every swarm (the document replaces the one stored before)."""
        async with self._save_lock:  # saves land in order: the last one is the newest
            document = {swarm_id: swarm.stored() for swarm_id, swarm in swarms.items()}
            await self.faces.store_reply(FACE, SWARMS_KEY, json.dumps(document), now_iso())
