"""A stdio client that closes its input while a turn streams, and goes on
reading (``printf ... | appserver app-server``, a script done sending), gets the
turn's one terminal event (``turn/cancelled``, ``serverShutdown``) and its open
item completed before the server exits, as at SIGTERM; nothing was left open on
the wire."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio

from tests.support.servers import running_server
from tests.support.turns import (
    new_thread,
    one_item,
    start_turn,
    terminals,
    wait_count,
    wait_terminal,
)


async def test_end_of_input_ends_the_running_turn_where_the_client_sees_it(
    workspace: Path,
) -> None:
    with anyio.fail_after(30):
        async with running_server("stdio", workspace) as sut, sut.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "?stream 100000\n?delay 5")
            await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 2)
            await client.stream.close()  # end of input; the client goes on reading
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "serverShutdown"
            agent = one_item(client, turn_id, "agentMessage", mark)
            assert agent["status"] == "completed" and agent["payload"]["text"]
            with contextlib.suppress(ConnectionError):  # the server exits: its output ends
                while not client.closed:
                    await client.wait(lambda m: True, 10, start=len(client.messages))
            assert len(terminals(client, turn_id, mark)) == 1


async def test_end_of_input_gives_a_running_automation_task_back(workspace: Path) -> None:
    """As SIGTERM does (automations.md, restarts): the cut run is a stop, not a failure."""
    with anyio.fail_after(30):
        async with running_server("stdio", workspace) as sut, sut.connect() as client:
            created = await client.request(
                "automation/task/create",
                {
                    "title": "Slow",
                    "description": "?stream 1000\n?delay 20",
                    "workflowTemplate": "---\nmax_rounds: 1\n---\n{{ task.description }}",
                },
            )
            running = await client.notification(
                "automation/task/updated",
                where=lambda p: p["task"]["id"] == created["taskId"] and "threadId" in p["task"],
            )
            await client.request("thread/subscribe", {"threadId": running["task"]["threadId"]})
            await client.notification("item/agentMessage/delta")
            await client.stream.close()  # end of input
            with contextlib.suppress(ConnectionError):  # the server exits: its output ends
                while not client.closed:
                    await client.wait(lambda m: True, 10, start=len(client.messages))
    task = workspace / ".craft" / "tasks" / created["taskId"] / "task.md"
    assert "status: pending" in task.read_text("utf-8")
