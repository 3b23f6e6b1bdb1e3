"""Fault injection: kill -9 a real server at each point of a turn's life.

After each kill the server is started again on the same SQLite file and we
check the stored state (the acknowledged turn is there and failed, its input
kept, ids never reused, ``PRAGMA integrity_check`` clean), the replay (one
terminal event per turn) and the process table (no command the dead server
ran is still running). Mid-stream kills are in ``test_recovery.py``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from tests.support.client import RpcClient
from tests.support.processes import alive, ws_client, ws_server
from tests.support.turns import is_notification, new_thread, read_turn, run_turn, start_turn

STREAMING = {"commandExecutionStreaming": True}


async def kill_9(process: Process) -> None:
    process.send_signal(signal.SIGKILL)
    with anyio.fail_after(10):
        await process.wait()


def integrity(workspace: Path) -> str:
    with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


async def replayed(client: RpcClient, thread_id: str) -> list[dict[str, Any]]:
    """Every stored event of the thread, as a fresh subscriber gets them."""
    mark = client.mark()
    await client.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
    await client.settle()
    return [m for m in client.messages[mark:] if is_notification(m)]


def terminal_counts(events: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        if event["method"] in ("turn/completed", "turn/failed", "turn/cancelled"):
            turn_id = event["params"]["turn"]["id"]
            counts[turn_id] = counts.get(turn_id, 0) + 1
    return counts


async def eventually(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Poll an outside-world condition (another process's fate) until it holds."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.02)


async def test_a_turn_acknowledged_just_before_kill_9_is_failed_never_lost(
    workspace: Path,
) -> None:
    """The answer to turn/start is sent after the turn is committed, so kill -9
    right after it cannot lose the turn, and its id is never handed out again."""
    script = "?stream 1000\n?delay 20"
    acknowledged: list[str] = []
    with anyio.fail_after(90):
        async with ws_server(workspace) as (process, url), ws_client(url) as client:
            thread_id = await new_thread(client)
        for _ in range(3):
            async with ws_server(workspace) as (process, url), ws_client(url) as client:
                acknowledged.append(await start_turn(client, thread_id, script))
                await kill_9(process)
        assert acknowledged == ["turn_001", "turn_002", "turn_003"]

        async with ws_server(workspace) as (_, url), ws_client(url, "after") as client:
            for turn_id in acknowledged:
                turn = await read_turn(client, thread_id, turn_id)
                assert turn["status"] == "failed", turn
                assert "server stopped" in turn["error"]
                user = [i for i in turn["items"] if i["type"] == "userMessage"]
                assert [u["payload"]["text"] for u in user] == [script]
            events = await replayed(client, thread_id)
            assert terminal_counts(events) == dict.fromkeys(acknowledged, 1)
            next_turn, terminal = await run_turn(client, thread_id, "still here")
            assert next_turn == "turn_004"
            assert terminal["method"] == "turn/completed"
    assert integrity(workspace) == "ok"


async def test_kill_9_with_an_approval_pending(workspace: Path) -> None:
    with anyio.fail_after(60):
        async with ws_server(workspace) as (process, url), ws_client(url) as client:
            thread_id = await new_thread(client)
            turn_id = await start_turn(client, thread_id, "!touch approved.txt")
            request = await client.wait(
                lambda m: m.get("method") == "item/approval/request" and "id" in m
            )
            assert request["params"]["turnId"] == turn_id
            await kill_9(process)

        async with ws_server(workspace) as (_, url), ws_client(url, "after") as client:
            turn = await read_turn(client, thread_id, turn_id)
            assert turn["status"] == "failed"
            types = [item["type"] for item in turn["items"]]
            assert "approvalRequest" in types and "toolResult" not in types
            events = await replayed(client, thread_id)
            assert terminal_counts(events) == {turn_id: 1}
            # Nobody is asked about a request its turn no longer waits for.
            asked = [m for m in client.messages if m.get("method") == "item/approval/request"]
            assert [m for m in asked if "id" in m] == []
    assert not (workspace / "approved.txt").exists()
    assert integrity(workspace) == "ok"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table in /proc")
async def test_kill_9_with_a_command_running_kills_the_command(workspace: Path) -> None:
    """The command and what it started die with the server; they cannot touch
    the workspace after their turn was marked failed."""
    command = (
        "!echo $$ > shell.pid; (sleep 300; touch too-late.txt) & echo $! > child.pid;"
        " echo ready; wait"
    )
    with anyio.fail_after(60):
        async with (
            ws_server(workspace) as (process, url),
            ws_client(url, capabilities=STREAMING) as client,
        ):
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            turn_id = await start_turn(client, thread_id, command)
            await client.wait(
                lambda m: (
                    m.get("method") == "item/commandExecution/outputDelta"
                    and "ready" in m["params"]["delta"]
                )
            )
            pids = [int((workspace / name).read_text()) for name in ("shell.pid", "child.pid")]
            assert all(alive(pid) for pid in pids)
            await kill_9(process)
        await eventually(lambda: not any(alive(pid) for pid in pids))

        async with ws_server(workspace) as (_, url), ws_client(url, "after") as client:
            turn = await read_turn(client, thread_id, turn_id)
            assert turn["status"] == "failed"
            events = await replayed(client, thread_id)
            assert terminal_counts(events) == {turn_id: 1}
    assert not (workspace / "too-late.txt").exists()
    assert integrity(workspace) == "ok"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table in /proc")
async def test_kill_9_kills_what_a_finished_command_left_running(workspace: Path) -> None:
    """A command that exited but left a process in the background (``cmd &``):
    that process dies with the server too."""
    command = "!(sleep 300; touch too-late.txt) & echo $! > bg.pid"
    with anyio.fail_after(60):
        async with ws_server(workspace) as (process, url), ws_client(url) as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            _, terminal = await run_turn(client, thread_id, command)
            assert terminal["method"] == "turn/completed"
            background = int((workspace / "bg.pid").read_text())
            assert alive(background)
            await kill_9(process)
        await eventually(lambda: not alive(background))
    assert not (workspace / "too-late.txt").exists()
