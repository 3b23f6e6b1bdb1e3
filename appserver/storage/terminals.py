"""Background terminals (``terminals``): the only place that knows that SQL.

A terminal is stored as its wire object without output (``BackgroundTerminal``,
camelCase JSON; the output lives in its file). Deleting the thread deletes its
terminals' rows (``ON DELETE CASCADE``); output files stay until their directory
is removed. Implements :class:`appserver.tools.terminals.TerminalStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from appserver.storage.db import Database

if TYPE_CHECKING:
    from appserver.protocol.terminals import BackgroundTerminal


def _terminals(rows: Sequence[Any]) -> list[BackgroundTerminal]:
    """The terminals stored in ``rows`` (their wire model loads with the first one:
    a workspace whose agent never ran one never imports it)."""
    if not rows:
        return []
    from appserver.protocol.terminals import BackgroundTerminal

    return [BackgroundTerminal.model_validate_json(row[0]) for row in rows]


class TerminalRepository:
    """Every terminal the agent started in this workspace."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def put(self, terminal: BackgroundTerminal) -> None:
        """Store ``terminal`` (its ``output`` is not kept), replacing an earlier state."""
        record = terminal.model_copy(update={"output": ""})
        await self.db.write(
            [
                (
                    "INSERT INTO terminals"
                    " (session_id, thread_id, status, started_at, terminal_json)"
                    " VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (session_id) DO UPDATE SET"
                    " status = excluded.status, terminal_json = excluded.terminal_json",
                    (
                        terminal.session_id,
                        terminal.thread_id,
                        terminal.status,
                        terminal.started_at,
                        record.model_dump_json(by_alias=True, exclude_none=True),
                    ),
                )
            ]
        )

    async def get(self, session_id: str) -> BackgroundTerminal | None:
        """The stored terminal, or ``None``."""
        rows = await self.db.lookup_or_fetch(
            "SELECT terminal_json FROM terminals WHERE session_id = ?", (session_id,)
        )
        found = _terminals(rows)
        return found[0] if found else None

    async def list_terminals(self, thread_id: str | None = None) -> list[BackgroundTerminal]:
        """Stored terminals (of ``thread_id``), newest first."""
        if thread_id is None:
            rows = await self.db.fetch(
                "SELECT terminal_json FROM terminals ORDER BY started_at DESC, session_id"
            )
        else:
            rows = await self.db.fetch(
                "SELECT terminal_json FROM terminals WHERE thread_id = ?"
                " ORDER BY started_at DESC, session_id",
                (thread_id,),
            )
        return _terminals(rows)

    async def running(self) -> list[BackgroundTerminal]:
        """Terminals stored as ``running`` (after a restart: the lost ones)."""
        rows = await self.db.fetch(
            "SELECT terminal_json FROM terminals WHERE status = 'running' ORDER BY started_at"
        )
        return _terminals(rows)
