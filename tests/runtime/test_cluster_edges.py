"""Nothing lost at the edges of a cluster (issue 32, docs/scale-out.md).

Real node processes on one real PostgreSQL database, real WebSocket clients:
cron runs on a thread another node keeps busy, an approval and a node that has
just joined, a dead node's half-streamed item, a node that stalls past its
lease and comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from tests.support.client import RpcClient
from tests.support.cluster import running_nodes
from tests.support.cron_servers import add_job
from tests.support.turns import new_thread

LEASE = 1.0  # seconds; the default is 10
TERMINAL = ("turn/completed", "turn/failed", "turn/cancelled")


async def until(condition: Callable[[], bool], *clients: RpcClient, timeout: float = 20) -> None:
    """Wait until ``condition()`` holds, looking again whenever a client receives."""
    with anyio.fail_after(timeout):
        while not condition():
            async with anyio.create_task_group() as tg:

                async def next_message(client: RpcClient) -> None:
                    await client.wait(lambda m: True, timeout, start=len(client.messages))
                    tg.cancel_scope.cancel()

                for client in clients:
                    tg.start_soon(next_message, client)


def of_thread(client: RpcClient, thread_id: str) -> list[dict[str, Any]]:
    """The thread's notifications (those with a seq), in arrival order."""
    return [
        m
        for m in client.notifications()
        if m["params"].get("threadId") == thread_id and "seq" in m["params"]
    ]


async def test_cron_runs_due_together_on_one_thread_all_run_on_two_nodes(
    workspace: Path, postgres_url: str
) -> None:
    # docs/cron.md: a run on a busy thread waits ("late, never lost"), also when
    # the thread is busy on another node.
    async with (
        running_nodes(2, workspace, postgres_url, lease=LEASE) as (a, b),
        a.connect("a") as on_a,
        b.connect("b") as on_b,
    ):
        thread_id = await new_thread(on_a)
        due = int(time.time() * 1000) + 2000
        jobs = [
            await add_job(
                on_a,
                name=f"job{number}",
                message="?stream 8\n?delay 40",
                threadId=thread_id,
                schedule={"kind": "at", "atMs": due},
            )
            for number in range(4)
        ]
        ids = {job["id"] for job in jobs}

        def results() -> list[dict[str, Any]]:
            return [
                m["params"]
                for client in (on_a, on_b)
                for m in client.notifications("system/jobResult")
                if m["params"].get("jobId") in ids
            ]

        await until(lambda: len(results()) == len(ids), on_a, on_b, timeout=30)
        assert sorted(r["jobId"] for r in results()) == sorted(ids)
        assert [r.get("error") for r in results()] == [None] * len(ids)
        stored = await on_b.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        turns = stored["thread"]["turns"]
        assert [turn["status"] for turn in turns] == ["completed"] * len(ids)
        refs = sorted(turn["items"][0]["payload"].get("triggerRefId") for turn in turns)
        assert refs == sorted(ids)

