"""Turns: ``turn/start`` (Codex input parts as ours, per-turn overrides) and
``turn/interrupt``. Their events reach the client through
:mod:`~appserver.faces.codex.streams`.

Overrides, as in Codex, hold for this turn and the later ones: ``model`` and
``approvalPolicy`` are written to the thread's configuration (what DotCraft's
``thread/config/update`` writes, so DotCraft clients see them),
``approvalsReviewer`` is kept with the thread's Codex policy. ``cwd`` must be
the workspace (as for ``thread/start``); ``sandboxPolicy`` is accepted and
changes nothing (our boundary is the workspace with approvals, reported as
``workspaceWrite``, as ``thread/start`` does with ``sandbox``); ``effort``,
``summary`` and the rest have no counterpart here and are ignored (debug log).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from appserver.faces.codex.shapes import codex_policy, our_policy, split_turn_key, turn_shape
from appserver.faces.codex.threads import KEPT_POLICY, kept_entry, kept_policy, workspace_cwd
from appserver.faces.codex.wire import CodexError, Message, text_param

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession

log = logging.getLogger("appserver.faces.codex")

# turn/start fields that change nothing here (no runtime counterpart).
IGNORED = (
    "sandboxPolicy",
    "effort",
    "summary",
    "personality",
    "serviceTier",
    "serviceTierForTurn",
    "outputSchema",
    "disabledPluginIds",
)


def input_parts(value: Any, skills: bool = False) -> list[Any]:
    """Codex ``UserInput`` parts as ours. ``skill`` parts become our ``skillRef``
    when ``skills`` (a skills family resolves them), else they are left out."""
    if not isinstance(value, list):
        raise CodexError("Invalid request: missing field `input`")
    parts: list[Any] = []
    for part in value:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            # As data (runtime/inputs.py): a text turn builds no model.
            parts.append({"type": "text", "text": part["text"]})
            continue
        from appserver.protocol.turns import (
            FileRefPart,
            ImageUrlPart,
            LocalImagePart,
            SkillRefPart,
        )

        if kind == "localImage" and isinstance(part.get("path"), str):
            parts.append(LocalImagePart(type="localImage", path=part["path"]))
        elif kind == "image" and isinstance(part.get("url"), str):
            parts.append(ImageUrlPart(type="image", url=part["url"]))
        elif kind == "mention" and isinstance(part.get("path"), str):
            parts.append(FileRefPart(type="fileRef", path=part["path"]))
        elif kind == "skill":
            name = part.get("name")
            if skills and isinstance(name, str):
                parts.append(SkillRefPart(type="skillRef", name=name))
            else:
                log.debug("skill %r ignored: no skills family in this process", name)
        else:
            raise CodexError(f"Invalid request: unsupported input {kind!r}")
    return parts


async def apply_overrides(session: CodexSession, thread_id: str, params: Message) -> None:
    """Make ``turn/start``'s overrides the thread's (module docstring)."""
    workspace_cwd(session, params)
    model, policy, reviewer = (
        params.get("model"),
        params.get("approvalPolicy"),
        params.get("approvalsReviewer"),
    )
    if model is not None and (not isinstance(model, str) or not model):
        raise CodexError("Invalid request: model must be a non-empty string")
    for name in IGNORED:
        if params.get(name) is not None:
            log.debug("turn/start %s ignored: no counterpart here", name)
    threads = session.runtime.threads
    record = await threads.get(thread_id)
    current = dict(record.configuration or {})
    wanted = dict(current)
    if model is not None:
        wanted["model"] = model
    if policy is not None:
        wanted["approvalPolicy"] = our_policy(policy)
    if policy is not None or isinstance(reviewer, str):
        shown, kept = (
            session.policies.get(thread_id)
            or kept_policy(record)
            or (
                codex_policy(current.get("approvalPolicy")),
                "user",
            )
        )
        session.policies[thread_id] = asked = (
            policy if policy is not None else shown,
            reviewer if isinstance(reviewer, str) else kept,
        )
        wanted[KEPT_POLICY] = kept_entry(*asked)  # for later turns and resumes
    if wanted != current:
        await threads.configure(thread_id, wanted)


async def turn_start(session: CodexSession, params: Message) -> Message:
    from appserver.protocol.errors import RpcError
    from appserver.runtime.errors import TurnInProgress

    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    skills = "skillRef" in session.runtime.materializer.resolvers
    parts = input_parts(params.get("input"), skills)
    await apply_overrides(session, thread_id, params)
    await session.streams.watch(thread_id)
    try:
        active = await session.runtime.turns.start(thread_id, parts, origin=session.seat)
    except RpcError as exc:  # a skills family's refusal (unknown or disabled skill)
        raise CodexError(f"Invalid request: {exc.message}") from None
    except TurnInProgress:
        running = session.runtime.engine.active.get(thread_id)
        if running is None:
            raise  # it runs in another process: refused as before
        # Codex takes a second turn/start as more input for the running turn and
        # answers with that turn (its SDK's thread.turn() while one runs).
        steered = await steer_input(session, thread_id, running.record.id, parts)
        return {"turn": turn_shape(thread_id, steered, "running")}
    return {"turn": turn_shape(thread_id, active.record.id, "running")}


async def turn_interrupt(session: CodexSession, params: Message) -> Message:
    from appserver.runtime.errors import TurnNotRunning

    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    key = text_param(params, "turnId", required=True)
    assert key is not None
    try:
        owner, turn_id = split_turn_key(key)
    except ValueError:
        raise CodexError(f"no active turn to interrupt: {key}") from None
    if owner != thread_id:
        raise CodexError(f"no active turn to interrupt: {key}")
    try:
        await session.runtime.turns.interrupt(thread_id, turn_id)
    except TurnNotRunning:
        raise CodexError("no active turn to interrupt") from None
    return {}


async def steer_input(session: CodexSession, thread_id: str, turn_id: str, parts: Any) -> str:
    """Put ``parts`` into the running turn ``turn_id`` (``turn/steer``, and a
    ``turn/start`` while a turn runs, as Codex takes it); the turn's id."""
    from appserver.runtime.errors import Refusal

    turns = session.runtime.turns
    entry, _queue = await turns.enqueue(thread_id, parts, session.seat)
    try:
        steered, _queue = await turns.steer(thread_id, turn_id, entry.id, session.seat, keep=True)
    except Refusal:
        # The turn ended meanwhile: the input must not wait in a queue the Codex
        # client cannot see, to run later as a turn it never started.
        with contextlib.suppress(Refusal):
            await turns.remove_queued(thread_id, entry.id, session.seat)
        raise CodexError("no active turn to steer") from None
    return steered
