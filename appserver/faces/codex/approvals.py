"""Our approval questions as Codex's server requests, and Codex's decisions as ours.

A gated ``shell`` call becomes ``item/commandExecution/requestApproval``, a file
write or edit ``item/fileChange/requestApproval`` (``itemId`` = the call's
Codex item, already started). Decisions: ``accept``, ``acceptForSession``,
``decline`` and ``cancel`` as they are; ``{acceptWithExecpolicyAmendment}``
-> our ``acceptAlways`` (the exact command, not Codex's argv prefix); anything
else (``{}``, what the SDK answers requests it does not know) -> ``decline``.

Threads started with ``approvalsReviewer: auto_review`` (the SDK's default:
a model would review) or ``approvalPolicy: never`` are never asked: what
would be asked is declined (fail closed), with a ``warning`` notification saying
so. Approvals with no Codex request of their own ask
``item/permissions/requestApproval``: a web fetch ``{network: {enabled: true}}``,
a file read or listing outside the workspace ``{fileSystem: {read: [path],
entries: [{access: read, path}]}}``; granting it accepts (``scope: session``:
for the session), granting less declines. The rest (MCP tools, a client tool's
own approval kind) are declined.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from appserver.faces.codex.items import now_ms
from appserver.faces.codex.shapes import turn_key
from appserver.runtime.events import QuestionRefused, QuestionUnanswered

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession
    from appserver.protocol.base import WireModel

log = logging.getLogger("appserver.faces.codex")

PLAIN = frozenset({"accept", "acceptForSession", "decline", "cancel"})


def decision(answer: Mapping[str, Any]) -> str:
    """Our decision for a Codex approval answer."""
    value = answer.get("decision")
    if isinstance(value, str) and value in PLAIN:
        return value
    if isinstance(value, dict) and "acceptWithExecpolicyAmendment" in value:
        return "acceptAlways"
    return "decline"


def fail_closed(session: CodexSession, thread_id: str) -> bool:
    """Whether this thread's questions are declined unasked."""
    policy, reviewer = session.policies.get(thread_id, (None, "user"))
    return policy == "never" or reviewer != "user"


async def ask(
    session: CodexSession, request: WireModel, timeout: float
) -> str | Mapping[str, object]:
    from appserver.protocol.turns import ApprovalRequestParams

    if not isinstance(request, ApprovalRequestParams):
        raise QuestionRefused("not an approval request")
    if session.ended:
        raise QuestionRefused("the Codex client is gone")
    thread_id, turn_id = request.thread_id, request.turn_id
    if fail_closed(session, thread_id):
        policy, reviewer = session.policies.get(thread_id, (None, "user"))
        why = "approvalPolicy never" if policy == "never" else f"approvalsReviewer {reviewer}"
        session.notify(
            "warning",
            {
                "threadId": thread_id,
                "message": f"Declined without asking ({why}: there is no approval reviewer "
                f"here): {request.approval_type} {request.operation} {request.target}".rstrip(),
            },
        )
        return "decline"
    call = await session.streams.gated_call(thread_id, turn_id, request.item_id)
    params: dict[str, Any] = {
        "threadId": thread_id,
        "turnId": turn_key(thread_id, turn_id),
        "itemId": call.id if call is not None else request.item_id,
        "startedAtMs": call.started_ms if call is not None else now_ms(),
        "reason": request.reason,
    }
    if request.approval_type == "shell":
        method = "item/commandExecution/requestApproval"
        params.update(
            command=request.operation,
            cwd=request.target,
            commandActions=[{"type": "unknown", "command": request.operation}],
            availableDecisions=["accept", "acceptForSession", "decline", "cancel"],
        )
    elif request.approval_type == "file" and request.operation in ("write", "edit"):
        if request.target in session.file_grants.get(thread_id, ()):
            return "accept"  # acceptForSession of this file, earlier in this thread
        method = "item/fileChange/requestApproval"
        if call is not None:
            inside = os.path.commonpath([request.target, session.workspace]) == session.workspace
            shown = os.path.relpath(request.target, session.workspace) if inside else request.target
            session.streams.start_file_change(thread_id, turn_id, call, shown, request.diff)
    else:
        wanted = permissions(request.approval_type, request.operation, request.target)
        if wanted is None:
            log.info("declined a %s approval: no Codex request for it", request.approval_type)
            return "decline"
        method = "item/permissions/requestApproval"
        params.update(cwd=session.workspace, permissions=wanted)
    try:
        answer = await session.request(method, params, thread_id, timeout)
    except TimeoutError:
        raise QuestionUnanswered(f"no answer within {timeout:g}s") from None
    if session.ended and not answer:
        raise QuestionRefused("the Codex client is gone")
    if method == "item/permissions/requestApproval":
        return permissions_decision(answer, request.approval_type, request.target)
    decided = decision(answer)
    if method == "item/fileChange/requestApproval" and decided == "acceptForSession":
        # Codex: "future changes to the same files" (not, as our grant would,
        # every write in the workspace): kept here, per thread and path.
        session.file_grants.setdefault(thread_id, set()).add(request.target)
        return "accept"
    return decided


def permissions(approval_type: str, operation: str, target: str) -> dict[str, Any] | None:
    """The permission profile ``item/permissions/requestApproval`` asks for one
    of our approvals (``None``: none fits, e.g. an MCP tool)."""
    if approval_type == "network":
        return {"network": {"enabled": True}}
    if approval_type == "file" and operation in ("read", "list"):
        entry = {"access": "read", "path": {"type": "path", "path": target}}
        return {"fileSystem": {"read": [target], "entries": [entry]}}
    return None


def _grants_path(file_system: Any, target: str) -> bool:
    if not isinstance(file_system, Mapping):
        return False
    for key in ("read", "write"):
        paths = file_system.get(key)
        if isinstance(paths, list) and target in paths:
            return True
    entries = file_system.get("entries")
    for entry in entries if isinstance(entries, list) else []:
        path = entry.get("path") if isinstance(entry, Mapping) else None
        if (
            isinstance(path, Mapping)
            and path.get("path") == target
            and entry.get("access") in ("read", "write")
        ):
            return True
    return False


def permissions_decision(answer: Mapping[str, Any], approval_type: str, target: str) -> str:
    """Our decision for a permissions answer: what was asked granted -> ``accept``
    (``scope: session`` -> ``acceptForSession``); anything less -> ``decline``."""
    granted = answer.get("permissions")
    if not isinstance(granted, Mapping):
        return "decline"
    if approval_type == "network":
        network = granted.get("network")
        ok = isinstance(network, Mapping) and network.get("enabled") is True
    else:
        ok = _grants_path(granted.get("fileSystem"), target)
    if not ok:
        return "decline"
    return "acceptForSession" if answer.get("scope") == "session" else "accept"
