"""Stored records for tests that build them by hand."""

from __future__ import annotations

from typing import Any

from appserver.protocol.ids import now_iso
from appserver.storage.records import ThreadRecord


def thread_record(thread_id: str, **fields: Any) -> ThreadRecord:
    """An active thread of workspace ``/w`` made now, with ``fields`` set."""
    stamp = now_iso()
    values: dict[str, Any] = {
        "workspace_path": "/w",
        "user_id": "local",
        "origin_channel": "cli",
        "status": "active",
        "created_at": stamp,
        "last_active_at": stamp,
    }
    return ThreadRecord(id=thread_id, **{**values, **fields})
