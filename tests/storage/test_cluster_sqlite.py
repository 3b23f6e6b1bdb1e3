"""The workspace's SQLite file as a cluster store (storage/cluster_sqlite.py):
several connections (as several processes have) claim each orphaned turn once;
a process whose node lock is free is dead at once; linked lock directories
stop the start (docs/security.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
import pytest

from appserver.storage.cluster_sqlite import SqliteClusterStore
from appserver.storage.db import SqliteDatabase
from tests.support.cluster import seed_running_turn
from tests.support.servers import child_env, server_command


async def test_an_orphaned_turn_is_claimed_by_one_sweeper(tmp_path: Path) -> None:
    path = tmp_path / ".craft" / "appserver.db"
    databases = [await SqliteDatabase.open(path) for _ in range(4)]
    try:
        await seed_running_turn(databases[0], "dead-node")
        sweepers = [
            SqliteClusterStore(db, f"sweeper-{n}", tmp_path / ".craft")
            for n, db in enumerate(databases)
        ]
        for sweeper in sweepers:
            await sweeper.join("/w")  # live nodes, sweeping at once
        claims = await asyncio.gather(*(s.claim_orphaned_turns(10.0) for s in sweepers))
        assert sorted(len(claim) for claim in claims) == [0, 0, 0, 1]
        # The claimer is alive (it holds its node lock): not claimed again.
        assert not any(await asyncio.gather(*(s.claim_orphaned_turns(10.0) for s in sweepers)))
        for sweeper in sweepers:
            await sweeper.close()
    finally:
        for db in databases:
            await db.close()


async def test_a_process_whose_node_lock_is_free_is_dead_before_its_lease_ends(
    tmp_path: Path,
) -> None:
    craft = tmp_path / ".craft"
    runner_db = await SqliteDatabase.open(craft / "appserver.db")
    sweeper_db = await SqliteDatabase.open(craft / "appserver.db")
    try:
        runner = SqliteClusterStore(runner_db, "runner", craft)
        sweeper = SqliteClusterStore(sweeper_db, "sweeper", craft)
        await runner.join("/w")
        await sweeper.join("/w")
        await seed_running_turn(runner_db, "runner")
        # Alive: its heartbeat is fresh and it holds its lock.
        assert await sweeper.claim_orphaned_turns(3600.0) == []
        # Its lock goes as a killed process's would (the kernel drops it); its
        # heartbeat row stays fresh, yet the turn is claimed at once.
        assert runner._node_lock is not None
        runner._node_lock.release()
        await sweeper.send("runner", "approval/answer", {"requestId": "r1"})
        assert await sweeper.claim_orphaned_turns(3600.0) == [("t1", "turn_001")]
        assert await sweeper.live_peers(3600.0) == []
        # What was sent to the dead process goes with it: nobody would take it.
        assert await sweeper_db.fetch("SELECT node_id FROM cluster_commands", ()) == []
        await sweeper.close()
    finally:
        await runner_db.close()
        await sweeper_db.close()


@pytest.mark.parametrize("name", ["nodes", "locks"])
async def test_a_linked_lock_directory_stops_the_start(
    workspace: Path, tmp_path: Path, name: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    craft = workspace / ".craft"
    craft.mkdir()
    (craft / name).symlink_to(elsewhere, target_is_directory=True)
    # A stdio server answers initialize while its runtime opens (AppServer.open(defer=True)).
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"clientInfo": {"name": "t", "version": "1"}, "capabilities": {}},
    }
    with anyio.fail_after(60):
        result = await anyio.run_process(
            server_command(workspace),
            input=json.dumps(initialize).encode() + b"\n",
            check=False,
            env=child_env(),
        )
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert f"refusing to use {craft / name}: it is a symbolic link" in stderr, stderr
    assert "Traceback" not in stderr
    assert list(elsewhere.iterdir()) == []
