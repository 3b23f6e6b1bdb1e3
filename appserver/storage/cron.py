"""Cron job rows and the heartbeat's state: the only place that knows their SQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appserver.storage.db import Database, Row


@dataclass
class CronJobRecord:
    """One job as stored. ``schedule`` is the validated wire schedule."""

    id: str
    name: str
    message: str
    schedule: dict[str, Any]
    enabled: bool
    delete_after_run: bool
    created_at_ms: int
    dedicated: bool
    thread_id: str | None = None
    approval_policy: str | None = None
    next_run_at_ms: int | None = None
    last_run_at_ms: int | None = None
    last_status: str | None = None
    last_error: str | None = None
    last_thread_id: str | None = None
    last_result: str | None = None


@dataclass
class RunRecord:
    """What one run changes on its job (``thread_id``: a dedicated thread made for it)."""

    thread_id: str | None
    last_run_at_ms: int
    last_status: str
    last_error: str | None
    last_thread_id: str | None
    last_result: str | None
    next_run_at_ms: int | None = None


@dataclass
class HeartbeatState:
    thread_id: str | None = None
    last_run_at_ms: int | None = None
    last_result: str | None = None
    last_error: str | None = None


def _job(row: Row) -> CronJobRecord:
    return CronJobRecord(
        id=row["id"],
        name=row["name"],
        message=row["message"],
        schedule=json.loads(row["schedule_json"]),
        enabled=bool(row["enabled"]),
        delete_after_run=bool(row["delete_after_run"]),
        created_at_ms=row["created_at_ms"],
        dedicated=bool(row["dedicated"]),
        thread_id=row["thread_id"],
        approval_policy=row["approval_policy"],
        next_run_at_ms=row["next_run_at_ms"],
        last_run_at_ms=row["last_run_at_ms"],
        last_status=row["last_status"],
        last_error=row["last_error"],
        last_thread_id=row["last_thread_id"],
        last_result=row["last_result"],
    )


# Unix seconds by SQLite's clock (every process on the machine shares it).
_SQLITE_EPOCH = "((julianday('now') - 2440587.5) * 86400.0)"


class CronRepository:
    """Cron jobs and the heartbeat row. Every write is one transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # Nodes sharing the database: (this node, lease seconds).
        # Due runs are then claimed, so one node runs each.
        self.cluster: tuple[str, float] | None = None
        # How many other nodes were alive at the last sweep (none: nobody
        # else can claim or change a job, so nothing needs looking at early).
        # Unknown unless told: assume there are some.
        self.peers: Callable[[], int] = lambda: 1

    def _unclaimed(self) -> tuple[str, list[Any]]:
        """SQL (and its arguments) keeping out jobs another live node is running."""
        if self.cluster is None:
            return "", []
        node, lease = self.cluster
        fresh = (
            "heartbeat_at > now() - make_interval(secs => ?)"
            if self.db.dialect == "postgresql"
            else f"heartbeat_at > {_SQLITE_EPOCH} - ?"  # Unix seconds (migrations/0013)
        )
        return (
            " AND (claimed_by IS NULL OR claimed_by = ? OR claimed_by NOT IN"
            f" (SELECT node_id FROM cluster_nodes WHERE {fresh}))",
            [node, lease],
        )

    async def claim(self, job: CronJobRecord) -> bool:
        """Take the job's due run for this node (always ``True`` on one node):
        the run is this node's while it is alive, another's if it dies first."""
        if self.cluster is None:
            return True
        unclaimed, args = self._unclaimed()
        async with self.db.transaction() as conn:
            changed = await conn.execute(
                "UPDATE cron_jobs SET claimed_by = ? WHERE id = ? AND enabled = 1"
                f" AND next_run_at_ms IS NOT DISTINCT FROM ?{unclaimed}",
                (self.cluster[0], job.id, job.next_run_at_ms, *args),
            )
        return changed > 0

    async def claim_heartbeat(self, interval_s: float) -> bool:
        """Whether this node runs the periodic heartbeat now: none ran within
        most of an interval, by the database's clock (always ``True`` on one node,
        or while no other node is alive)."""
        if self.cluster is None or not self.peers():
            return True
        window_ms = int(interval_s * 900)  # 90 %: timers on several nodes drift
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO heartbeat_state (id) VALUES (1) ON CONFLICT (id) DO NOTHING"
            )
            now_ms = (
                "(extract(epoch FROM now()) * 1000)::bigint"
                if self.db.dialect == "postgresql"
                else f"CAST({_SQLITE_EPOCH} * 1000 AS INTEGER)"
            )
            changed = await conn.execute(
                f"UPDATE heartbeat_state SET last_run_at_ms = {now_ms} WHERE id = 1"
                f" AND (last_run_at_ms IS NULL OR last_run_at_ms < {now_ms} - ?)",
                (window_ms,),
            )
        return changed > 0

    async def insert(self, job: CronJobRecord) -> None:
        """Add a job. Raises ``sqlite3.IntegrityError`` on a duplicate id."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO cron_jobs (id, name, message, schedule_json, enabled,"
                " delete_after_run, created_at_ms, thread_id, dedicated, approval_policy,"
                " next_run_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.id,
                    job.name,
                    job.message,
                    json.dumps(job.schedule, separators=(",", ":")),
                    int(job.enabled),
                    int(job.delete_after_run),
                    job.created_at_ms,
                    job.thread_id,
                    int(job.dedicated),
                    job.approval_policy,
                    job.next_run_at_ms,
                ),
            )

    async def get(self, job_id: str) -> CronJobRecord | None:
        rows = await self.db.fetch("SELECT * FROM cron_jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    async def list_jobs(self, include_disabled: bool) -> list[CronJobRecord]:
        """Jobs in creation order (rowid breaks ties within a millisecond)."""
        where = "" if include_disabled else " WHERE enabled = 1"
        rows = await self.db.fetch(f"SELECT * FROM cron_jobs{where} ORDER BY created_at_ms, rowid")
        return [_job(row) for row in rows]

    async def delete(self, job_id: str) -> bool:
        """Remove a job; ``False`` if it was not there."""
        async with self.db.transaction() as conn:
            return await conn.execute("DELETE FROM cron_jobs WHERE id = ?", (job_id,)) > 0

    async def set_enabled(self, job_id: str, enabled: bool, next_run_at_ms: int | None) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE cron_jobs SET enabled = ?, next_run_at_ms = ? WHERE id = ?",
                (int(enabled), next_run_at_ms, job_id),
            )

    async def set_thread(self, job_id: str, thread_id: str) -> None:
        """Keep the job's dedicated thread, as soon as it is made (a run cut
        before it is recorded does not leave it behind to make another)."""
        await self.db.write(
            [("UPDATE cron_jobs SET thread_id = ? WHERE id = ?", (thread_id, job_id))]
        )

    async def save_run(self, job_id: str, run: RunRecord) -> None:
        """Record a run's outcome and the job's next run."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE cron_jobs SET thread_id = ?, last_run_at_ms = ?, last_status = ?,"
                " last_error = ?, last_thread_id = ?, last_result = ?, next_run_at_ms = ?,"
                " claimed_by = NULL WHERE id = ?",
                (
                    run.thread_id,
                    run.last_run_at_ms,
                    run.last_status,
                    run.last_error,
                    run.last_thread_id,
                    run.last_result,
                    run.next_run_at_ms,
                    job_id,
                ),
            )

    async def first_due(self, now_ms: int) -> CronJobRecord | None:
        """The enabled job that has waited longest for a run due by ``now_ms``."""
        unclaimed, args = self._unclaimed()
        rows = await self.db.fetch(
            f"SELECT * FROM cron_jobs WHERE enabled = 1 AND next_run_at_ms <= ?{unclaimed}"
            " ORDER BY next_run_at_ms, id LIMIT 1",
            (now_ms, *args),
        )
        return _job(rows[0]) if rows else None

    async def earliest_run(self) -> int | None:
        """The earliest ``next_run_at_ms`` of an enabled job."""
        unclaimed, args = self._unclaimed()
        rows = await self.db.fetch(
            f"SELECT MIN(next_run_at_ms) FROM cron_jobs WHERE enabled = 1{unclaimed}", args
        )
        value = rows[0][0] if rows else None
        return int(value) if value is not None else None

    # --- heartbeat ---------------------------------------------------------------

    async def heartbeat(self) -> HeartbeatState:
        rows = await self.db.fetch(
            "SELECT thread_id, last_run_at_ms, last_result, last_error"
            " FROM heartbeat_state WHERE id = 1"
        )
        if not rows:
            return HeartbeatState()
        row = rows[0]
        return HeartbeatState(
            thread_id=row["thread_id"],
            last_run_at_ms=row["last_run_at_ms"],
            last_result=row["last_result"],
            last_error=row["last_error"],
        )

    async def save_heartbeat(self, state: HeartbeatState) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO heartbeat_state (id, thread_id, last_run_at_ms, last_result,"
                " last_error) VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
                " thread_id = excluded.thread_id, last_run_at_ms = excluded.last_run_at_ms,"
                " last_result = excluded.last_result, last_error = excluded.last_error",
                (state.thread_id, state.last_run_at_ms, state.last_result, state.last_error),
            )
