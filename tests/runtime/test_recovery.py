"""A server that dies mid-turn: kill -9 of a real process, SIGTERM, and the
storage invariant the recovery relies on (reference §8 persistence)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio

from appserver.storage.db import Database
from tests.support.client import RpcClient
from tests.support.processes import ws_client, ws_server
from tests.support.turns import (
    is_notification,
    new_thread,
    read_turn,
    run_turn,
    start_turn,
    streamed_text,
    wait_count,
    wait_terminal,
)


def _deltas(client: RpcClient) -> list[dict[str, Any]]:
    return [m for m in client.messages if m.get("method") == "item/agentMessage/delta"]


async def test_kill_9_mid_turn_fails_the_turn_and_keeps_the_text(workspace: Path) -> None:
    script = "?stream 1000\n?delay 20"
    with anyio.fail_after(60):
        async with ws_server(workspace) as (process, url), ws_client(url) as client:
            thread_id = await new_thread(client)
            turn_id = await start_turn(client, thread_id, script)
            # 40 deltas at 20 ms: 0.8 s of streaming, past the 0.5 s checkpoint.
            await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 40)
            process.send_signal(signal.SIGKILL)
            with anyio.fail_after(10):
                await process.wait()
            seen = "".join(d["params"]["delta"] for d in _deltas(client))

        async with ws_server(workspace) as (_, url), ws_client(url, "after") as client:
            turn = await read_turn(client, thread_id, turn_id)
            assert turn["status"] == "failed"
            assert "server stopped" in turn["error"]
            assert turn["completedAt"]
            items = {item["type"]: item for item in turn["items"]}
            user = items["userMessage"]
            assert user["status"] == "completed"
            assert user["payload"]["text"] == script
            assert user["payload"]["nativeInputParts"] == [{"type": "text", "text": script}]
            agent = items["agentMessage"]
            assert agent["status"] == "completed"
            text = agent["payload"]["text"]
            assert text, "the checkpointed text was lost"
            assert streamed_text(1000).startswith(text)
            assert seen.startswith(text) or text.startswith(seen)

            # The recovery is in the replay, after the items it completed.
            mark = client.mark()
            await client.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
            failed = await client.notification("turn/failed", start=mark)
            assert failed["turn"]["id"] == turn_id and "server stopped" in failed["error"]
            await client.settle()
            replay = [m for m in client.messages[mark:] if is_notification(m)]
            numbers = [m["params"]["seq"] for m in replay]
            assert numbers == sorted(set(numbers))
            methods = [m["method"] for m in replay]
            assert methods.count("turn/failed") == 1
            completed = [
                m["params"]["item"]
                for m in replay
                if m["method"] == "item/completed" and m["params"]["item"]["id"] == agent["id"]
            ]
            assert [c["payload"]["text"] for c in completed] == [text]

            # The thread goes on: numbering continues and a new turn completes.
            new_turn, terminal = await run_turn(client, thread_id, "still here")
            assert terminal["method"] == "turn/completed"
            assert new_turn == "turn_002"
            assert min(
                m["params"]["seq"] for m in client.messages if m.get("method") == "turn/completed"
            ) > max(numbers)


async def test_sigterm_mid_turn_cancels_it_for_the_client(workspace: Path) -> None:
    with anyio.fail_after(60):
        async with ws_server(workspace) as (process, url), ws_client(url) as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "?stream 1000\n?delay 10")
            await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 5)
            process.send_signal(signal.SIGTERM)
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "serverShutdown"
            agent = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "agentMessage"]
            assert agent and agent[0]["payload"]["text"]
            with anyio.fail_after(15):
                await process.wait()
            assert process.returncode == 0
        async with ws_server(workspace) as (_, url), ws_client(url, "after") as client:
            turn = await read_turn(client, thread_id, turn_id)
            assert turn["status"] == "cancelled"
            assert [i["payload"]["text"] for i in turn["items"] if i["type"] == "agentMessage"] == [
                agent[0]["payload"]["text"]
            ]


async def test_a_cancelled_begin_does_not_wedge_the_database(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "wedge.db")
    try:
        real_execute = db.conn.execute
        with anyio.CancelScope() as scope:

            def execute(sql: str, *args: Any) -> Any:
                if sql == "BEGIN IMMEDIATE":
                    scope.cancel()  # the interrupt lands while BEGIN is in flight
                return real_execute(sql, *args)

            db.conn.execute = execute  # type: ignore[method-assign]
            async with db.transaction() as conn:
                await conn.execute("SELECT 1")
        db.conn.execute = real_execute  # type: ignore[method-assign]
        assert scope.cancelled_caught
        with anyio.fail_after(5):
            async with db.transaction() as conn:
                await conn.execute("CREATE TABLE t (x INTEGER)")
                await conn.execute("INSERT INTO t VALUES (1)")
        rows = await db.fetch("SELECT x FROM t")
        assert [row[0] for row in rows] == [1]
    finally:
        await db.close()
