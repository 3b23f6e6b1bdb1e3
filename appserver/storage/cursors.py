"""Paging cursors: opaque to clients, and refused when this server did not issue them."""

from __future__ import annotations

import base64
import json
from typing import Any


class BadCursor(ValueError):
    """A paging cursor that this server did not issue."""


def encode_cursor(*parts: Any) -> str:
    """A cursor holding ``parts`` (JSON scalars), URL-safe."""
    raw = json.dumps(list(parts), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def list_cursor(last_active_at: str, thread_id: str) -> str:
    """The ``list_threads`` cursor of the page that follows this thread."""
    return encode_cursor(last_active_at, thread_id)


def turns_cursor(seq: int) -> str:
    """The ``turns`` cursor of the page of turns older than the turn ``seq``."""
    return encode_cursor(seq)


def decode_cursor(cursor: str, arity: int) -> list[Any]:
    """The ``arity`` scalars a cursor from :func:`encode_cursor` holds.
    Raises :class:`BadCursor` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise BadCursor(cursor) from exc
    if not isinstance(parts, list) or len(parts) != arity:
        raise BadCursor(cursor)
    # Only scalars we issued: anything else would reach SQLite as a bad binding.
    if not all(isinstance(part, str | int) and not isinstance(part, bool) for part in parts):
        raise BadCursor(cursor)
    return parts
