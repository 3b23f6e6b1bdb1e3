"""Nothing lost at the edges of a cluster (issue 32, docs/scale-out.md).

Real node processes on one real PostgreSQL database, real WebSocket clients:
cron runs on a thread another node keeps busy, an approval and a node that has
just joined, a dead node's half-streamed item, a node that stalls past its
lease and comes back.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from tests.support.client import RpcClient
from tests.support.cluster import running_nodes, two_nodes
from tests.support.cron_servers import add_job
from tests.support.turns import (
    Approver,
    any_delta,
    enqueue,
    new_thread,
    read_turn,
    start_turn,
    streamed_text,
    wait_count,
    wait_terminal,
)

LEASE = 1.0  # seconds; the default is 10
TERMINAL = ("turn/completed", "turn/failed", "turn/cancelled")


async def until(condition: Callable[[], bool], *clients: RpcClient, timeout: float = 20) -> None:
    """Wait until ``condition()`` holds, looking again whenever a client receives."""
    with anyio.fail_after(timeout):
        while True:
            # Counted before looking: a message that lands after the look (the
            # last one awaited, say) wakes the wait below instead of being
            # taken as already seen, which left the wait for one more message.
            seen = [len(client.messages) for client in clients]
            if condition():
                return
            async with anyio.create_task_group() as tg:

                async def next_message(client: RpcClient, start: int) -> None:
                    await client.wait(lambda m: True, timeout, start=start)
                    tg.cancel_scope.cancel()

                for client, start in zip(clients, seen, strict=True):
                    tg.start_soon(next_message, client, start)


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
    async with two_nodes(workspace, postgres_url, LEASE) as (_a, _b, on_a, on_b):
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


async def test_an_approval_reaches_a_node_that_has_just_joined(
    workspace: Path, postgres_url: str
) -> None:
    # A long lease: sweeps (which count the live nodes) come seldom, so who is
    # asked can only be right if it does not wait for one.
    lease = 40.0
    mute = {"approvalSupport": False}  # a client that cannot answer approvals
    async with (
        running_nodes(1, workspace, postgres_url, lease=lease) as (a,),
        a.connect("a") as on_a,
        a.connect("a-mute", mute) as mute_a,
    ):
        silent = Approver(on_a, None)  # sees the question, never answers
        first = await new_thread(on_a)
        with anyio.fail_after(30):
            # Raised while A is alone: asked on A only...
            first_turn = await start_turn(on_a, first, "!echo joined-later")
            await silent.wait_request()
            # ...and offered to B's clients once B joins.
            async with (
                running_nodes(1, workspace, postgres_url, lease=lease, first="B") as (b,),
                b.connect("b") as on_b,
            ):
                answerer = Approver(on_b, "accept")
                await on_b.request("thread/subscribe", {"threadId": first})
                terminal = await wait_terminal(on_a, first_turn, timeout=20)
                assert terminal["method"] == "turn/completed"
                assert len(answerer.requests) == 1
                # Raised right after B came up, from a client that cannot answer:
                # B's subscribed client is asked, not the policy.
                second = await new_thread(on_a)
                await on_b.request("thread/subscribe", {"threadId": second})
                second_turn = await start_turn(mute_a, second, "!echo just-joined")
                terminal = await wait_terminal(on_b, second_turn, 20, thread_id=second)
        assert terminal["method"] == "turn/completed"
        assert len(answerer.requests) == 2
        items = terminal["params"]["turn"]["items"]
        assert not [item for item in items if item["type"] == "error"], items
        result = next(item for item in items if item["type"] == "toolResult")
        assert result["payload"]["success"] is True


async def test_a_dead_node_s_streaming_item_keeps_every_delivered_delta(
    workspace: Path, postgres_url: str
) -> None:
    async with two_nodes(workspace, postgres_url, LEASE) as (a, _b, on_a, on_b):
        thread_id = await new_thread(on_a)
        await on_b.request("thread/subscribe", {"threadId": thread_id})
        with anyio.fail_after(20):
            turn_id = await start_turn(on_a, thread_id, "?stream 400\n?delay 20")
            # Killed well inside the first checkpoint interval (0.5 s).
            await wait_count(on_b, any_delta(), 10)
            a.kill()
            terminal = await wait_terminal(on_b, turn_id, timeout=15)
        assert terminal["method"] == "turn/failed"
        shown = "".join(
            m["params"]["delta"]
            for m in on_b.notifications("item/agentMessage/delta")
            if m["params"]["threadId"] == thread_id
        )
        assert len(shown) >= len(streamed_text(10))
        completed = [
            m["params"]["item"]
            for m in on_b.notifications("item/completed")
            if m["params"]["threadId"] == thread_id
            and m["params"]["item"]["type"] == "agentMessage"
        ]
        assert len(completed) == 1
        assert completed[0]["payload"]["text"].startswith(shown)
        stored = await read_turn(on_b, thread_id, turn_id)
        message = next(item for item in stored["items"] if item["type"] == "agentMessage")
        assert message["payload"]["text"] == completed[0]["payload"]["text"]


async def test_a_node_resumed_after_a_stall_delivers_the_end_another_node_wrote(
    workspace: Path, postgres_url: str
) -> None:
    async with (
        running_nodes(2, workspace, postgres_url, lease=LEASE) as (a, b),
        a.connect("a") as on_a,
        a.connect("a-watcher") as watcher_a,
        b.connect("b") as on_b,
    ):
        thread_id = await new_thread(on_a)
        for client in (watcher_a, on_b):
            await client.request("thread/subscribe", {"threadId": thread_id})
        with anyio.fail_after(30):
            turn_id = await start_turn(on_a, thread_id, "?stream 400\n?delay 20")
            await wait_count(watcher_a, any_delta(), 5)
            a.process.send_signal(signal.SIGSTOP)  # a stall past the lease
            try:
                ended = await wait_terminal(on_b, turn_id, timeout=20)
            finally:
                a.process.send_signal(signal.SIGCONT)
            assert ended["method"] == "turn/failed"
            # A wakes, finds it was taken for dead, and delivers what B wrote.
            for client in (on_a, watcher_a):
                terminal = await wait_terminal(client, turn_id, timeout=20)
                assert terminal["method"] == "turn/failed"
                assert terminal["params"]["seq"] == ended["params"]["seq"]
            await a.wait_log("taken for dead")
            await on_b.settle()
            await watcher_a.settle()
        expected = [m["params"]["seq"] for m in of_thread(on_b, thread_id)]
        for client in (on_a, watcher_a):
            seen = [m["params"]["seq"] for m in of_thread(client, thread_id)]
            tail = [seq for seq in seen if seq >= expected[0]]
            assert tail == expected[: len(tail)], (client.name, seen, expected)
            assert len(tail) >= expected.index(ended["params"]["seq"]) + 1


async def test_a_turn_left_running_by_an_uncertain_commit_is_failed_by_its_own_node(
    workspace: Path, postgres_url: str
) -> None:
    import asyncpg

    async with (
        running_nodes(1, workspace, postgres_url, lease=LEASE) as (a,),
        a.connect("a") as on_a,
        a.connect("late") as late,
    ):
        thread_id = await new_thread(on_a)
        with anyio.fail_after(20):
            turn_id = await start_turn(on_a, thread_id, "?stream 2")
            await wait_terminal(on_a, turn_id)
        # What a COMMIT whose answer was lost leaves when it did not land: the
        # turn still running in the database, on a node that no longer runs it.
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(
                "UPDATE turns SET status = 'running', completed_at = NULL"
                " WHERE thread_id = $1 AND id = $2",
                thread_id,
                turn_id,
            )
        finally:
            await conn.close()
        await late.request("thread/subscribe", {"threadId": thread_id})
        refused = await late.fail(
            "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "x"}]}
        )
        assert refused.code == -32012
        with anyio.fail_after(LEASE * 10):  # a few sweeps, not a restart
            terminal = await wait_terminal(late, turn_id, timeout=LEASE * 10)
        assert terminal["method"] == "turn/failed"
        with anyio.fail_after(20):
            again = await start_turn(late, thread_id, "again")
            assert (await wait_terminal(late, again, thread_id=thread_id))["method"] == (
                "turn/completed"
            )


async def test_an_input_steered_into_a_turn_whose_node_died_goes_back_to_the_queue(
    workspace: Path, postgres_url: str
) -> None:
    """As when a turn ends before taking it (turns.md, the queue): the sweep that
    fails the dead node's turn puts the steered input back, first in line."""
    async with (
        running_nodes(2, workspace, postgres_url, lease=LEASE) as (a, b),
        a.connect("a") as on_a,
        b.connect("b") as on_b,
    ):
        with anyio.fail_after(40):
            approver = Approver(on_a, None)  # the turn parks at its approval
            thread_id = await new_thread(on_a)
            await on_b.request("thread/subscribe", {"threadId": thread_id})
            turn_id = await start_turn(on_a, thread_id, "!echo parked")
            await approver.wait_request()
            steered = (await enqueue(on_a, thread_id, "steered first"))["queuedInput"]
            await on_a.request(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": steered["id"]},
            )
            mark = on_b.mark()
            a.kill()
            terminal = await wait_terminal(on_b, turn_id, timeout=20, thread_id=thread_id)
            assert terminal["method"] == "turn/failed"
            # The sweep's update, the one that pauses the queue: the steer's own
            # (guidancePending) may reach this node after the mark.
            update = await on_b.notification(
                "thread/queue/updated", start=mark, where=lambda p: p.get("paused") is not None
            )
            assert [(q["id"], q["status"]) for q in update["queuedInputs"]] == [
                (steered["id"], "queued")
            ]
            assert update["paused"] == {"turnId": turn_id, "reason": "failed"}
            # The next enqueue runs the waiting input first, as after any failure.
            mark = on_b.mark()
            await enqueue(on_b, thread_id, "then this")
            started = await on_b.notification("turn/started", start=mark)
            second = started["turn"]["id"]
            done = await wait_terminal(on_b, second, thread_id=thread_id)
        users = [i for i in done["params"]["turn"]["items"] if i["type"] == "userMessage"]
        assert users[0]["payload"]["text"] == "steered first"


async def test_a_dead_node_s_question_is_not_asked_again(
    workspace: Path, postgres_url: str
) -> None:
    """The node that asked died: its turn is failed, and its question is over on
    every node. A client that subscribes later is not asked it, and it does not
    hide the next turn's question (docs/scale-out.md, "Approvals across nodes")."""
    async with two_nodes(workspace, postgres_url, LEASE) as (a, b, on_a, on_b):
        Approver(on_a, None)
        watcher = Approver(on_b, None)
        thread_id = await new_thread(on_a)
        await on_b.request("thread/subscribe", {"threadId": thread_id})
        first = await start_turn(on_a, thread_id, "!touch first")
        with anyio.fail_after(30):
            await watcher.wait_request()
            a.kill()
            terminal = await wait_terminal(on_b, first, 25, thread_id=thread_id)
            assert terminal["method"] == "turn/failed"
            async with b.connect("late") as late:
                asked = Approver(late, "decline")
                await late.request("thread/subscribe", {"threadId": thread_id})
                second = await start_turn(late, thread_id, "!touch second")
                request = await asked.wait_request(timeout=20)
                assert request["params"]["turnId"] == second
                ended = await wait_terminal(late, second, 20, thread_id=thread_id)
        assert ended["method"] == "turn/completed"
        assert [r["params"]["turnId"] for r in asked.requests] == [second]
        assert not (workspace / "first").exists() and not (workspace / "second").exists()
