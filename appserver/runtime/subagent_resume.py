"""Where external-CLI SubAgents' sessions are kept to be continued (DotCraft's
``ExternalCliSessionStore``).

When the workspace's ``SubAgent.EnableExternalCliSessionResume`` is on and a
profile ``supportsResume``, the session id a successful run printed is kept in
the **parent** thread's metadata, key ``dotcraft.externalCliSessions``: a JSON
list of ``{profileName, label, workingDirectory, sessionId, lastUpdatedAt}``,
the 32 most recent, one per profile + label (the child's nickname) + working
directory. The next run with the same key (a ``SendInput`` to the child, or a
new child of the same parent with the same nickname) passes it to the
profile's ``resumeArgTemplate``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio

from appserver.protocol.ids import now_iso
from appserver.storage.threads import ThreadRepository

METADATA_KEY = "dotcraft.externalCliSessions"
MAX_SESSIONS = 32


def _load(metadata: dict[str, str]) -> list[dict[str, Any]]:
    try:
        stored = json.loads(metadata.get(METADATA_KEY) or "[]")
    except ValueError:
        return []
    if not isinstance(stored, list):
        return []
    return [entry for entry in stored if isinstance(entry, dict)]


def _directory(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def _same(entry: dict[str, Any], profile: str, directory: str) -> bool:
    return (
        str(entry.get("profileName", "")).lower() == profile.lower()
        and entry.get("workingDirectory") == directory
    )


class ResumeSessions:
    """The parent threads' stored sessions (one lock per process: a read-modify-write)."""

    def __init__(self, repo: ThreadRepository) -> None:
        self.repo = repo
        self._lock = anyio.Lock()

    async def find(self, parent_id: str, profile: str, label: str, directory: str) -> str | None:
        """The session to continue for this profile, label and directory, if one is kept."""
        parent = await self.repo.get(parent_id)
        if parent is None:
            return None
        place = _directory(directory)
        matches = [
            entry
            for entry in _load(parent.metadata)
            if _same(entry, profile, place) and entry.get("label") == (label.strip() or None)
        ]
        matches.sort(key=lambda entry: str(entry.get("lastUpdatedAt", "")), reverse=True)
        found = matches[0].get("sessionId") if matches else None
        return found if isinstance(found, str) and found.strip() else None

    async def record(
        self, parent_id: str, profile: str, label: str, directory: str, session_id: str
    ) -> None:
        """Keep ``session_id`` as the one to continue next time."""
        if not (profile.strip() and session_id.strip()):
            return
        async with self._lock:
            parent = await self.repo.get(parent_id)
            if parent is None:
                return
            place, name = _directory(directory), label.strip() or None
            entries = [
                entry
                for entry in _load(parent.metadata)
                if not (_same(entry, profile, place) and entry.get("label") == name)
            ]
            entries.append(
                {
                    "profileName": profile.strip(),
                    "label": name,
                    "workingDirectory": place,
                    "sessionId": session_id.strip(),
                    "lastUpdatedAt": now_iso(),
                }
            )
            entries.sort(key=lambda entry: str(entry.get("lastUpdatedAt", "")), reverse=True)
            metadata = dict(parent.metadata)
            metadata[METADATA_KEY] = json.dumps(entries[:MAX_SESSIONS], separators=(",", ":"))
            await self.repo.update(parent_id, metadata=metadata)
