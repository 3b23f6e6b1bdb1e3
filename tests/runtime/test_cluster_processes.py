"""Several ``appserver app-server`` processes on one workspace, on the default
SQLite store (issue 28; docs/architecture.md, "Several processes on one
workspace"). Each is a real stdio process, as a client spawns it; they share
the workspace's database and event log.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process

from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY
from tests.support.servers import ProcessStream, child_env, server_command
from tests.support.turns import new_thread, start_turn, wait_terminal

LEASE = 2.0  # seconds (--node-lease); the default is 10
SLOW = "?stream 200\n?delay 20"  # ~4 s of text


@asynccontextmanager
async def stdio_server(workspace: Path) -> AsyncIterator[tuple[Process, RpcClient]]:
    """``appserver app-server`` over stdio, initialized; killed on the way out."""
    process = await anyio.open_process(
        server_command(workspace, "--node-lease", str(LEASE)),
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    async with process, anyio.create_task_group() as tg:
        client = RpcClient(ProcessStream(process), f"pid-{process.pid}")
        await client.run(tg)
        try:
            await client.initialize()
            yield process, client
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.fail_after(10):
                await process.wait()
            tg.cancel_scope.cancel()


async def test_a_thread_and_its_turn_are_seen_from_the_other_process(workspace: Path) -> None:
    async with stdio_server(workspace) as (_, first), stdio_server(workspace) as (_, second):
        thread_id = await new_thread(first)
        listed = await second.request("thread/list", {"identity": IDENTITY})
        assert [thread["id"] for thread in listed["data"]] == [thread_id]
        read = await second.request("thread/read", {"threadId": thread_id})
        assert read["thread"]["id"] == thread_id
        await second.request("thread/subscribe", {"threadId": thread_id})
        turn_id = await start_turn(first, thread_id, "?stream 5")
        # The turn runs in the first process; its events reach the second's client
        # through the shared log, deltas included, in seq order.
        ended = await wait_terminal(second, turn_id)
        assert ended["method"] == "turn/completed"
        seen = [m for m in second.notifications() if m["params"].get("threadId") == thread_id]
        deltas = [m for m in seen if m["method"] == "item/agentMessage/delta"]
        assert "".join(m["params"]["delta"] for m in deltas) == "".join(
            f"chunk {n} " for n in range(1, 6)
        )
        seqs = [m["params"]["seq"] for m in seen if "seq" in m["params"]]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert (await wait_terminal(first, turn_id))["method"] == "turn/completed"


async def test_a_killed_process_s_turn_is_failed_by_the_other_within_the_lease(
    workspace: Path,
) -> None:
    async with stdio_server(workspace) as (survivor_process, survivor):
        async with stdio_server(workspace) as (doomed_process, doomed):
            thread_id = await new_thread(doomed)
            await survivor.request("thread/subscribe", {"threadId": thread_id})
            mark = survivor.mark()
            turn_id = await start_turn(doomed, thread_id, SLOW)
            await survivor.notification("item/agentMessage/delta", start=mark)  # it runs
            doomed_process.kill()  # kill -9
            killed_at = time.monotonic()
            ended = await wait_terminal(survivor, turn_id, timeout=LEASE + 5, start=mark)
            assert time.monotonic() - killed_at < LEASE
            assert ended["method"] == "turn/failed"
        assert survivor_process.returncode is None
        read = await survivor.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert [turn["status"] for turn in read["thread"]["turns"]] == ["failed"]
        # The thread is usable again from the surviving process.
        again = await start_turn(survivor, thread_id, "?stream 2")
        assert (await wait_terminal(survivor, again))["method"] == "turn/completed"


async def test_a_clean_exit_leaves_the_other_process_s_turn_running(workspace: Path) -> None:
    async with stdio_server(workspace) as (_, keeper):
        async with stdio_server(workspace) as (leaver_process, leaver):
            thread_id = await new_thread(keeper)
            await leaver.request("thread/subscribe", {"threadId": thread_id})
            mark = keeper.mark()
            turn_id = await start_turn(keeper, thread_id, SLOW)
            await keeper.notification("item/agentMessage/delta", start=mark)
            assert leaver_process.stdin is not None
            await leaver_process.stdin.aclose()  # the client goes: a clean exit
            with anyio.fail_after(10):
                assert await leaver_process.wait() == 0
            # The keeper's turn was not ended by the other's exit...
            assert not [
                m
                for m in keeper.since(mark)
                if m.get("method") in ("turn/completed", "turn/failed", "turn/cancelled")
            ]
        # ...and finishes normally.
        ended = await wait_terminal(keeper, turn_id, timeout=20, start=mark)
        assert ended["method"] == "turn/completed"


async def test_a_subscribe_right_after_another_process_s_broadcast_still_gets_it(
    workspace: Path,
) -> None:
    """A subscribe without ``afterSeq`` replays nothing, so it skips nothing: a
    ``thread/started`` the other process stored just before (not yet delivered
    here) still reaches the subscriber, as it reaches every connection."""
    async with stdio_server(workspace) as (_, first), stdio_server(workspace) as (_, second):
        await second.request("thread/list", {"identity": IDENTITY})  # its runtime runs
        for _ in range(3):
            thread = await first.request("thread/start", {"identity": IDENTITY})
            thread_id = thread["thread"]["id"]
            await second.request("thread/subscribe", {"threadId": thread_id})
            await second.notification(
                "thread/started", where=lambda p, t=thread_id: p["thread"]["id"] == t, timeout=10
            )
