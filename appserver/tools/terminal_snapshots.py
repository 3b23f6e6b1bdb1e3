"""What a reader is shown of a background terminal: DotCraft's truncation rule
and the snapshot of a stored terminal.

Snapshots follow DotCraft's truncation rule: ``output`` is the last
``max_output_chars`` characters (trailing newlines dropped), after a
``... (truncated, N earlier chars)`` line when cut; ``originalOutputChars``
counts all of it; ``truncated`` says whether something was left out.

A terminal still stored as ``running`` that this server does not run
belonged to a server that went away: it is shown as ``lost``
(:func:`lost`). A stored terminal's output is read from its file, found
from its ids (:func:`stored_snapshot`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from appserver.protocol.ids import now_iso
from appserver.tools.terminal_files import KEPT_CHARS, TerminalFiles

if TYPE_CHECKING:
    # The terminals' wire model loads with the first terminal (a plain turn runs none).
    from appserver.protocol.terminals import BackgroundTerminal

DEFAULT_MAX_OUTPUT_CHARS = 10_000


def limit_output(raw: str, total: int, max_chars: int | None) -> tuple[str, int, bool]:
    """``(output, originalOutputChars, truncated)`` of ``raw``, the kept tail of
    ``total`` characters of output, shown up to ``max_chars`` (DotCraft's rule)."""
    text = raw.rstrip("\r\n")
    total = max(0, total - (len(raw) - len(text)))
    limit = KEPT_CHARS
    if max_chars is not None and max_chars > 0:
        limit = min(max_chars, KEPT_CHARS)
    shown = text[len(text) - limit :] if len(text) > limit else text
    omitted = total - len(shown)
    if omitted > 0:
        return f"... (truncated, {omitted} earlier chars)\n{shown}", total, True
    return shown or "(no output)", total, False


def shown_chars(max_output_chars: int | None) -> int:
    """A caller's ``maxOutputChars``: absent -> the default (0: all that is kept)."""
    return DEFAULT_MAX_OUTPUT_CHARS if max_output_chars is None else max_output_chars


def elapsed_ms(started_at: str, ended_at: str | None) -> int:
    """Milliseconds from ``started_at`` to ``ended_at`` (now if ``None``); 0 if unreadable."""
    try:
        start = datetime.fromisoformat(started_at)
        end = datetime.fromisoformat(ended_at or now_iso())
    except ValueError:
        return 0
    return max(0, int((end - start).total_seconds() * 1000))


def lost(stored: BackgroundTerminal) -> BackgroundTerminal:
    """``stored`` as ``lost``: it was running under a server that went away."""
    completed_at = stored.completed_at or now_iso()
    return stored.model_copy(
        update={
            "status": "lost",
            "completed_at": completed_at,
            "wall_time_ms": elapsed_ms(stored.started_at, completed_at),
        }
    )


async def stored_snapshot(
    files: TerminalFiles, stored: BackgroundTerminal, max_output_chars: int | None, *, runs: bool
) -> BackgroundTerminal:
    """``stored`` with the tail of its output file; ``runs`` says whether this
    server runs it (a ``running`` one it does not run is ``lost``)."""
    if stored.status == "running" and not runs:
        stored = lost(stored)
    counted = None if stored.status == "lost" else stored.original_output_chars
    # The file is found from the ids: a stored outputPath is never opened.
    raw, total = await anyio.to_thread.run_sync(
        files.read_tail, stored.thread_id, stored.session_id, counted
    )
    output, total, truncated = limit_output(raw, total, max_output_chars)
    update = {
        "output": output,
        "original_output_chars": total,
        "truncated": truncated,
        "output_path": str(files.path_of(stored.thread_id, stored.session_id)),
    }
    if stored.completed_at is None:
        update["wall_time_ms"] = elapsed_ms(stored.started_at, None)
    return stored.model_copy(update=update)
