"""The PostgreSQL engine's pieces: SQL translation, migrations kept in step, store URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from appserver.storage.db import load_migrations, migrations_dir, parse_store
from appserver.storage.postgres import PostgresDatabase, translate


def test_translate_rewrites_what_differs() -> None:
    assert translate("SELECT * FROM t WHERE a = ? AND b = ?") == (
        "SELECT * FROM t WHERE a = $1 AND b = $2"
    )
    assert translate("UPDATE t SET n = MAX(n, ?) WHERE id = ?") == (
        "UPDATE t SET n = GREATEST(n, $1) WHERE id = $2"
    )
    assert translate("SELECT 1 FROM t WHERE c IS ?") == (
        "SELECT 1 FROM t WHERE c IS NOT DISTINCT FROM $1"
    )
    assert translate("INSERT OR IGNORE INTO t (a) VALUES (?)") == (
        "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING"
    )
    assert translate("SELECT 1 WHERE a LIKE ? ESCAPE '\\'") == (
        "SELECT 1 WHERE a ILIKE $1 ESCAPE '\\'"
    )
    # A ? inside a literal is not a placeholder.
    assert translate("SELECT '?' , ?") == "SELECT '?' , $1"


def test_both_engines_have_the_same_migration_versions() -> None:
    sqlite = [(version, name) for version, name, _ in load_migrations(migrations_dir())]
    postgres = [
        (version, name) for version, name, _ in load_migrations(migrations_dir("postgresql"))
    ]
    assert sqlite == postgres


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, ("sqlite", "/ws/.craft/appserver.db")),
        ("sqlite:///state/app.db", ("sqlite", "/ws/state/app.db")),
        ("sqlite:////var/lib/app.db", ("sqlite", "/var/lib/app.db")),
        ("postgresql://u@h/db", ("postgresql", "postgresql://u@h/db")),
        ("postgres://u@h:5433/db", ("postgresql", "postgres://u@h:5433/db")),
    ],
)
def test_store_urls(url: str | None, expected: tuple[str, str]) -> None:
    assert parse_store(url, Path("/ws")) == expected


@pytest.mark.parametrize("url", ["mysql://x/y", "sqlite://", "nonsense"])
def test_bad_store_urls(url: str) -> None:
    with pytest.raises(ValueError):
        parse_store(url, Path("/ws"))


async def test_migrating_twice_is_a_no_op(postgres_url: str) -> None:
    db = await PostgresDatabase.open(postgres_url)
    try:
        assert await db.migrate() == []
        rows = await db.fetch("SELECT count(*) FROM schema_migrations")
        assert rows[0][0] == len(load_migrations(migrations_dir("postgresql")))
    finally:
        await db.close()


async def test_due_runs_and_heartbeats_are_claimed_once(postgres_url: str) -> None:
    from appserver.storage.cron import CronJobRecord, CronRepository, RunRecord

    db = await PostgresDatabase.open(postgres_url)
    try:
        for node in ("n1", "n2"):
            await db.write(
                [
                    (
                        "INSERT INTO cluster_nodes (node_id, workspace_path) VALUES (?, ?)",
                        (node, "/w"),
                    )
                ]
            )
        first, second = CronRepository(db), CronRepository(db)
        first.cluster, second.cluster = ("n1", 10.0), ("n2", 10.0)
        job = CronJobRecord(
            id="abcd1234",
            name="job",
            message="hi",
            schedule={"kind": "every", "everyMs": 60_000},
            enabled=True,
            delete_after_run=False,
            created_at_ms=1,
            dedicated=True,
            next_run_at_ms=1000,
        )
        await first.insert(job)
        assert await first.first_due(2000) is not None
        assert await first.claim(job)
        assert not await second.claim(job)  # n1 is alive and holds it
        assert await second.first_due(2000) is None
        assert await second.earliest_run() is None
        # n1 dies before recording the run: the due run is n2's to make.
        await db.write([("DELETE FROM cluster_nodes WHERE node_id = ?", ("n1",))])
        assert await second.claim(job)
        run = RunRecord(None, 2000, "ok", None, None, None, next_run_at_ms=61_000)
        await second.save_run(job.id, run)
        stored = await second.get(job.id)
        assert stored is not None and stored.next_run_at_ms == 61_000

        assert await first.claim_heartbeat(60.0)
        assert not await second.claim_heartbeat(60.0)  # one beat per interval
    finally:
        await db.close()


async def test_an_orphaned_turn_is_claimed_by_one_sweeper(postgres_url: str) -> None:
    import asyncio

    from appserver.storage.cluster import ClusterStore
    from tests.support.cluster import seed_running_turn

    db = await PostgresDatabase.open(postgres_url)
    try:
        await seed_running_turn(db, "dead-node")
        sweepers = [ClusterStore(db, f"sweeper-{n}") for n in range(4)]
        for sweeper in sweepers:
            await sweeper.join("/w")  # live nodes, sweeping at once
        # Many rounds: a sweeper whose statement began before another's claim
        # committed claimed the turn as well (~1 round in 4 before the fix).
        for _ in range(50):
            claims = await asyncio.gather(*(s.claim_orphaned_turns(10.0) for s in sweepers))
            assert sorted(len(claim) for claim in claims) == [0, 0, 0, 1], claims
            # The claimer is alive: its turn is not claimed again.
            assert not any(await asyncio.gather(*(s.claim_orphaned_turns(10.0) for s in sweepers)))
            await db.write([("UPDATE turns SET node_id = 'dead-node' WHERE id = 'turn_001'", ())])
        for sweeper in sweepers:
            await sweeper.close()
    finally:
        await db.close()


async def test_old_deltas_of_completed_items_are_pruned(postgres_url: str) -> None:
    from appserver.storage.cluster import ClusterStore

    db = await PostgresDatabase.open(postgres_url)
    try:
        old, now = "2020-01-01T00:00:00.000Z", "2999-01-01T00:00:00.000Z"
        await db.write(
            [
                (
                    "INSERT INTO threads (id, workspace_path, workspace_key, user_id,"
                    " origin_channel, status, created_at, last_active_at)"
                    " VALUES ('t1', '/w', '/w', 'u', 'cli', 'active', ?, ?)",
                    (old, old),
                ),
                (
                    "INSERT INTO turns (thread_id, id, seq, status, started_at)"
                    " VALUES ('t1', 'turn_001', 1, 'completed', ?)",
                    (old,),
                ),
                *[
                    (
                        "INSERT INTO items (thread_id, turn_id, id, seq, type, status,"
                        " created_at, payload_json) VALUES ('t1', 'turn_001', ?, ?, 'agentMessage',"
                        " ?, ?, '{}')",
                        (item, seq, status, old),
                    )
                    for item, seq, status in (("done", 1, "completed"), ("live", 2, "streaming"))
                ],
                *[
                    (
                        "INSERT INTO thread_events (thread_id, seq, method, params_json,"
                        " created_at, stream)"
                        " VALUES ('t1', ?, 'item/agentMessage/delta', '{}', ?, ?)",
                        (seq, created, stream),
                    )
                    for seq, created, stream in (
                        (1, old, "done"),
                        (2, now, "done"),
                        (3, old, "live"),
                    )
                ],
            ]
        )
        assert await ClusterStore(db, "n").prune_deltas(300) == 1
        rows = await db.fetch("SELECT seq FROM thread_events ORDER BY seq")
        assert [row[0] for row in rows] == [2, 3]  # recent, and still streaming
    finally:
        await db.close()


async def test_a_connection_released_mid_transaction_comes_back_clean(postgres_url: str) -> None:
    """The pool's reset is ours (one round trip fewer per release): it still
    rolls back what a holder left open."""
    db = await PostgresDatabase.open(postgres_url, min_size=1, max_size=1)
    try:
        async with db.pool.acquire() as conn:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TABLE left_open (n INT)")
        async with db.pool.acquire() as conn:
            assert not conn.is_in_transaction()
            missing = await conn.fetchval("SELECT to_regclass('left_open')")
            assert missing is None
    finally:
        await db.close()
