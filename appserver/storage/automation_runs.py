"""Who runs each automation task now, and its retries: the only SQL of Automations.

The tasks themselves are files (:mod:`appserver.storage.automation_tasks`);
with several processes or nodes on one database, a row here is the claim that
makes one of them, and only one, run a task. A claim is taken by compare-and-set
on the row as last seen, so of two nodes that saw the same row one wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from appserver.storage.db import Database, Row


@dataclass(frozen=True)
class RunClaim:
    """A task's row: ``node_id`` runs it (``None``: it waits for attempt
    ``attempts + 1``, not before ``retry_at_ms``)."""

    task_id: str
    node_id: str | None
    attempts: int
    retry_at_ms: int | None


def _claim(row: Row) -> RunClaim:
    return RunClaim(
        task_id=row["task_id"],
        node_id=row["node_id"],
        attempts=int(row["attempts"]),
        retry_at_ms=row["retry_at_ms"],
    )


class AutomationRunRepository:
    """The ``automation_runs`` rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def all(self) -> dict[str, RunClaim]:
        """Every row, by task id."""
        rows = await self.db.fetch(
            "SELECT task_id, node_id, attempts, retry_at_ms FROM automation_runs"
        )
        return {claim.task_id: claim for claim in map(_claim, rows)}

    async def claim(self, task_id: str, node_id: str, seen: RunClaim | None, now_ms: int) -> bool:
        """Take the task for ``node_id`` if its row is still as ``seen`` (absent
        when ``None``); ``False`` when another node changed it first."""
        async with self.db.transaction() as conn:
            if seen is None:
                changed = await conn.execute(
                    "INSERT INTO automation_runs (task_id, node_id, attempts, claimed_at_ms)"
                    " VALUES (?, ?, 0, ?) ON CONFLICT (task_id) DO NOTHING",
                    (task_id, node_id, now_ms),
                )
            else:
                changed = await conn.execute(
                    "UPDATE automation_runs SET node_id = ?, claimed_at_ms = ?"
                    " WHERE task_id = ? AND node_id IS NOT DISTINCT FROM ? AND attempts = ?",
                    (node_id, now_ms, task_id, seen.node_id, seen.attempts),
                )
        return changed > 0

    async def finish(self, task_id: str, node_id: str) -> None:
        """The run of ``node_id`` ended as it should: forget the task's row (and its retries)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM automation_runs WHERE task_id = ? AND node_id = ?",
                (task_id, node_id),
            )

    async def retry_later(
        self, task_id: str, node_id: str, attempts: int, retry_at_ms: int
    ) -> None:
        """The run of ``node_id`` ended unexpectedly: give the task back, to be
        tried again (attempt ``attempts + 1``) from ``retry_at_ms``."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE automation_runs SET node_id = NULL, attempts = ?, retry_at_ms = ?"
                " WHERE task_id = ? AND node_id = ?",
                (attempts, retry_at_ms, task_id, node_id),
            )

    async def forget_retries(self, task_id: str) -> None:
        """Drop a waiting retry (the task was run by hand, or deleted); a
        running task's row stays."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM automation_runs WHERE task_id = ? AND node_id IS NULL", (task_id,)
            )
