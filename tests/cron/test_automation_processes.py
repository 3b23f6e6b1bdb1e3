"""Automations across real processes: a server killed (``kill -9``) in the middle of a
task's run, and two nodes on one PostgreSQL database racing for an ``at`` task."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import anyio

from tests.support.client import RpcClient
from tests.support.cluster import two_nodes
from tests.support.processes import ws_client, ws_server
from tests.support.turns import wait_count

UPDATED = "automation/task/updated"
LEASE = 1.0  # seconds; the default is 10


async def read_task(client: RpcClient, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = await client.request("automation/task/read", {"taskId": task_id})
    return task


async def task_leaves(client: RpcClient, task_id: str, status: str) -> dict[str, Any]:
    """The task once its status is no longer ``status`` (woken by its notifications)."""
    while True:
        mark = client.mark()
        task = await read_task(client, task_id)
        if task["status"] != status:
            return task
        await client.notification(UPDATED, start=mark, where=lambda p: p["task"]["id"] == task_id)


async def test_a_task_killed_mid_run_is_not_left_running(workspace: Path) -> None:
    lease = ("--node-lease", "1")  # the killed process counts as gone within 0.75 s
    with anyio.fail_after(60):
        async with ws_server(workspace, *lease) as (process, url), ws_client(url) as client:
            created = await client.request(
                "automation/task/create",
                {
                    "title": "Slow",
                    "description": "?stream 1000\n?delay 20",
                    "workflowTemplate": "---\nmax_rounds: 1\n---\n{{ task.description }}",
                },
            )
            task_id = created["taskId"]
            running = await client.notification(
                UPDATED, where=lambda p: p["task"]["id"] == task_id and "threadId" in p["task"]
            )
            thread_id = running["task"]["threadId"]
            await client.request("thread/subscribe", {"threadId": thread_id})
            await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 5)
            process.send_signal(signal.SIGKILL)
            with anyio.fail_after(10):
                await process.wait()
        task_file = workspace / ".craft" / "tasks" / task_id / "task.md"
        assert "status: running" in task_file.read_text("utf-8")

        async with ws_server(workspace, *lease) as (_, url), ws_client(url, "after") as client:
            # Taken over at start: the interrupted run counts as a failed attempt and
            # the task waits for its retry (30 s by default), not stuck in `running`.
            task = await task_leaves(client, task_id, "running")
            assert task["status"] == "pending"
            read = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            assert [turn["status"] for turn in read["thread"]["turns"]] == ["failed"]
            assert await client.request("automation/task/delete", {"taskId": task_id}) == {
                "ok": True
            }
            assert not task_file.parent.exists()


async def test_an_at_task_runs_once_on_two_postgresql_nodes(
    workspace: Path, postgres_url: str
) -> None:
    async with two_nodes(workspace, postgres_url, LEASE) as (_node_a, _node_b, on_a, on_b):
        due = int(time.time() * 1000) + 1500
        summary = json.dumps({"summary": "once"})
        created = await on_a.request(
            "automation/task/create",
            {
                "title": "Once",
                "description": f"Do it.\n?tool CompleteLocalTask {summary}",
                "schedule": {"kind": "at", "atMs": due},
            },
        )
        task_id = created["taskId"]
        with anyio.fail_after(20):
            while (await read_task(on_b, task_id))["status"] != "completed":
                await anyio.sleep(0.1)  # either node may run it: poll the files
        # Give the other node every chance to run it a second time.
        await anyio.sleep(LEASE * 2)
        task = await read_task(on_b, task_id)
        assert (task["status"], task["agentSummary"]) == ("completed", "once")
        starts = [
            m
            for client in (on_a, on_b)
            for m in client.notifications(UPDATED)
            if m["params"]["task"]["id"] == task_id and "threadId" not in m["params"]["task"]
        ]
        assert len(starts) == 1, starts  # one `running` without a thread: one run
        read = await on_a.request(
            "thread/read", {"threadId": task["threadId"], "includeTurns": True}
        )
        assert len(read["thread"]["turns"]) == 1
