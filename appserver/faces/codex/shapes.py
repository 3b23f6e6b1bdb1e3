"""Codex's Thread, Turn and policy shapes from ours.

Codex times are Unix seconds; a thread's ``status`` is its run state
(``idle``, ``active`` with flags, ``notLoaded`` for threads this connection
has not started or resumed); our archive state is ``thread/list``'s filter.
Turn ids are ``<thread id>:<turn id>``, unique across threads (the SDK keys a
turn's stream by its id alone).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from appserver import __version__

Json = dict[str, Any]

# The Codex protocol version this face implements (the SDK gates some calls on
# at least 0.151.0): the recorded sessions are Codex 0.169's.
CODEX_VERSION = "0.169.0"
# Codex approval policy -> ours (docs/faces.md "Codex app-server").
POLICIES = {"untrusted": "default", "on-request": "autoApprove", "never": "autoApprove"}
TURN_STATUS = {
    "running": "inProgress",
    "waitingApproval": "inProgress",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "interrupted",
}


def unix_seconds(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return None


def turn_key(thread_id: str, turn_id: str) -> str:
    """Our turn's Codex id."""
    return f"{thread_id}:{turn_id}"


def split_turn_key(key: str) -> tuple[str, str]:
    """``(thread id, turn id)`` of a Codex turn id (``ValueError`` if not ours)."""
    thread_id, sep, turn_id = key.rpartition(":")
    if not sep or not thread_id or not turn_id:
        raise ValueError(key)
    return thread_id, turn_id


def our_policy(policy: Any) -> str:
    """Our approval policy for a Codex ``approvalPolicy`` (granular: autoApprove)."""
    if isinstance(policy, str):
        return POLICIES.get(policy, "default")
    return "autoApprove" if isinstance(policy, dict) else "default"


def codex_policy(ours: str | None) -> str:
    return "untrusted" if ours in (None, "default") else "on-request"


def sandbox(workspace: str) -> Json:
    """What our workspace boundary enforces: writes inside it unasked (by
    policy), outside it asked. Not an OS sandbox (no network limit)."""
    return {"type": "workspaceWrite", "writableRoots": [workspace], "networkAccess": True}


def thread_shape(
    *,
    thread_id: str,
    created_at: str,
    updated_at: str,
    status: Json,
    cwd: str,
    model_provider: str,
    model: str | None,
    name: str | None,
    preview: str = "",
    turns: list[Json] | None = None,
    forked_from_id: str | None = None,
) -> Json:
    created = unix_seconds(created_at) or 0
    shape: Json = {
        "id": thread_id,
        "sessionId": thread_id,
        "projectId": None,  # Codex 0.169 requires the member; we have no projects
        "preview": preview,
        "ephemeral": False,
        "modelProvider": model_provider,
        "model": model,
        "createdAt": created,
        "updatedAt": unix_seconds(updated_at) or created,
        "status": status,
        "cwd": cwd,
        "cliVersion": __version__,
        "source": "appServer",
        "name": name,
        "turns": turns or [],
    }
    if forked_from_id is not None:
        shape["forkedFromId"] = forked_from_id
    return shape


# Our turn failure codes (the fatal ``error`` item's ``code``) -> Codex's
# ``codexErrorInfo``; anything else is ``other``. We know no HTTP status.
ERROR_INFO: dict[str, Json | str] = {
    "provider_auth": "unauthorized",
    "provider_rate_limit": "rateLimitExceeded",
    "provider_unavailable": {"httpConnectionFailed": {"httpStatusCode": None}},
    "provider_timeout": {"responseStreamDisconnected": {"httpStatusCode": None}},
    "internal": "internalServerError",
}


def turn_error(message: str | None, code: str | None) -> Json:
    """Codex's TurnError for a failed turn (``code``: ours, if known)."""
    return {
        "message": message or "the turn failed",
        "codexErrorInfo": ERROR_INFO.get(code or "", "other"),
        "additionalDetails": None,
    }


def turn_shape(
    thread_id: str,
    turn_id: str,
    status: str,
    *,
    started_at: str | None = None,
    completed_at: str | None = None,
    error: str | None = None,
    error_code: str | None = None,
    items: list[Json] | None = None,
) -> Json:
    started = unix_seconds(started_at)
    completed = unix_seconds(completed_at)
    duration = None
    if started_at and completed_at:
        try:
            span = datetime.fromisoformat(completed_at) - datetime.fromisoformat(started_at)
            duration = int(span.total_seconds() * 1000)
        except ValueError:
            duration = None
    codex_status = TURN_STATUS.get(status, "failed")
    return {
        "id": turn_key(thread_id, turn_id),
        "items": items or [],
        "itemsView": "full" if items is not None else "notLoaded",
        "status": codex_status,
        "error": turn_error(error, error_code) if codex_status == "failed" else None,
        "startedAt": started,
        "completedAt": completed,
        "durationMs": duration,
    }
