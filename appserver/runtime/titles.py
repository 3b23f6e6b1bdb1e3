"""A thread's title, made from its first message, and its announcement."""

from __future__ import annotations

from appserver.runtime.emissions import Emission
from appserver.runtime.turns.model import ActiveTurn, UserInput
from appserver.storage.threads import ThreadRepository, update_statement

# Longest title a thread gets from its first message (ellipsis included).
TITLE_LENGTH = 60


def title_from(text: str, limit: int = TITLE_LENGTH) -> str | None:
    """A thread title from a message: its first non-blank line with whitespace
    collapsed, cut (at a word boundary when one is near) to ``limit``
    characters ending in an ellipsis; ``None`` for a message with no text."""
    for line in text.splitlines():
        words = " ".join(line.split())
        if not words:
            continue
        if len(words) <= limit:
            return words
        cut = words[: limit - 1]
        space = cut.rfind(" ")
        if words[limit - 1] != " " and space >= limit // 2:  # not mid-word
            cut = cut[:space]
        return cut.rstrip() + "…"
    return None


def renamed(thread_id: str, name: str) -> Emission:
    """``thread/renamed`` to everyone, with the stored name it stands for."""
    return Emission(
        "thread/renamed",
        {"threadId": thread_id, "displayName": name},
        broadcast=True,
        rows=(update_statement(thread_id, display_name=name),),
    )


async def name_untitled(
    repo: ThreadRepository, active: ActiveTurn, user: UserInput
) -> list[Emission]:
    """A thread without a ``displayName`` is named from the first message a
    turn starts with (``thread/renamed`` as for ``thread/rename``, committed
    with the turn's start); a name the client chose is never replaced."""
    if active.thread.display_name:
        return []
    title = title_from(user.display_text)
    if title is None:
        return []
    current = await repo.get(active.thread_id)
    if current is None or current.display_name:
        return []
    active.thread.display_name = title
    return [renamed(active.thread_id, title)]
