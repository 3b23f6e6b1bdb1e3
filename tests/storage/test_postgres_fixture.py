"""The real-PostgreSQL fixtures (tests/support/postgres.py) give working, isolated databases."""

from __future__ import annotations

from pathlib import Path

import anyio
import asyncpg

from tests.support.postgres import PostgresCluster


async def test_postgres_url_is_a_working_database(postgres_url: str) -> None:
    connection = await asyncpg.connect(postgres_url)
    try:
        assert await connection.fetchval("SELECT 1") == 1
        assert (
            await connection.fetchval("SELECT current_database()") == postgres_url.rsplit("/", 1)[1]
        )
    finally:
        await connection.close()


async def test_fresh_databases_are_distinct_and_dropped(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    other = await postgres_cluster.create_database()
    assert other != postgres_url
    # A table made in one database is not seen from the other.
    first = await asyncpg.connect(postgres_url)
    second = await asyncpg.connect(other)
    try:
        await first.execute("CREATE TABLE only_here (id int)")
        assert await second.fetchval("SELECT to_regclass('only_here')") is None
    finally:
        await first.close()
        # Still connected: drop_database must force the connection out rather than fail.
        await postgres_cluster.drop_database(other)
        await second.close()
    admin = await asyncpg.connect(postgres_cluster.url_for("postgres"))
    try:
        names = {row["datname"] for row in await admin.fetch("SELECT datname FROM pg_database")}
    finally:
        await admin.close()
    assert other.rsplit("/", 1)[1] not in names
    assert postgres_url.rsplit("/", 1)[1] in names


async def test_listen_notify_between_two_connections(postgres_url: str) -> None:
    listener = await asyncpg.connect(postgres_url)
    notifier = await asyncpg.connect(postgres_url)
    received: list[str] = []
    arrived = anyio.Event()

    def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        received.append(payload)
        arrived.set()

    try:
        await listener.add_listener("wakeup", on_notify)
        await notifier.execute("SELECT pg_notify('wakeup', 'hello')")
        with anyio.fail_after(10):
            await arrived.wait()
    finally:
        await listener.close()
        await notifier.close()
    assert received == ["hello"]


async def test_cluster_runs_as_a_non_root_user(postgres_url: str) -> None:
    connection = await asyncpg.connect(postgres_url)
    try:
        backend_pid = await connection.fetchval("SELECT pg_backend_pid()")
        # The backend is a local process: its /proc entry belongs to the user it runs as.
        assert Path(f"/proc/{backend_pid}").stat().st_uid != 0
    finally:
        await connection.close()


def test_start_temporary_cleans_up_after_itself() -> None:
    with PostgresCluster.start_temporary(name="temporary") as cluster:
        root = cluster.root
        assert root is not None
        pid = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
        assert cluster.url_for("postgres").endswith(f":{cluster.port}/postgres")
    assert not root.exists()
    assert not cluster.running
    # pg_ctl stop -w returned only after the postmaster exited (a zombie awaiting its
    # reaper, whoever adopted it, has exited too).
    assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        return " Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
