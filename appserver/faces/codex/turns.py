"""Turns: ``turn/start`` (Codex input parts as ours) and ``turn/interrupt``.
Their events reach the client through :mod:`~appserver.faces.codex.streams`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appserver.faces.codex.shapes import split_turn_key, turn_shape
from appserver.faces.codex.wire import CodexError, Message, text_param

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession


def input_parts(value: Any) -> list[Any]:
    """Codex ``UserInput`` parts as ours (``skill`` parts are left out)."""
    from appserver.protocol.turns import FileRefPart, ImageUrlPart, LocalImagePart, TextPart

    if not isinstance(value, list):
        raise CodexError("Invalid request: missing field `input`")
    parts: list[Any] = []
    for part in value:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(TextPart(type="text", text=part["text"]))
        elif kind == "localImage" and isinstance(part.get("path"), str):
            parts.append(LocalImagePart(type="localImage", path=part["path"]))
        elif kind == "image" and isinstance(part.get("url"), str):
            parts.append(ImageUrlPart(type="image", url=part["url"]))
        elif kind == "mention" and isinstance(part.get("path"), str):
            parts.append(FileRefPart(type="fileRef", path=part["path"]))
        elif kind != "skill":
            raise CodexError(f"Invalid request: unsupported input {kind!r}")
    return parts


async def turn_start(session: CodexSession, params: Message) -> Message:
    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    parts = input_parts(params.get("input"))
    await session.streams.watch(thread_id)
    active = await session.runtime.turns.start(thread_id, parts, origin=session.seat)
    return {"turn": turn_shape(thread_id, active.record.id, "running")}


async def turn_interrupt(session: CodexSession, params: Message) -> Message:
    from appserver.runtime.errors import TurnNotRunning

    thread_id = text_param(params, "threadId", required=True)
    key = text_param(params, "turnId", required=True)
    assert thread_id is not None and key is not None
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
