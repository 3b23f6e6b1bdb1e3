"""A thread's title, made from its first message."""

from __future__ import annotations

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
