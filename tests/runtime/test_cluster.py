"""Several nodes on one PostgreSQL database (issue 17, docs/scale-out.md).

Each node is a real ``appserver`` process with its own WebSocket port; the
clients are real WebSocket clients spread across them, as behind a load
balancer. The nodes share one workspace directory and one database.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.client import RpcClient, RpcFailure
from tests.support.cluster import Node, running_nodes, two_nodes
from tests.support.cron_servers import add_job
from tests.support.turns import Approver, new_thread, start_turn, wait_terminal

LEASE = 1.0  # seconds; the default is 10


def thread_events(client: RpcClient, thread_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
    """``(seq, method, params)`` of the thread's notifications, in arrival order."""
    return [
        {"seq": m["params"]["seq"], "method": m["method"], "params": m["params"]}
        for m in client.notifications()
        if m["params"].get("threadId") == thread_id and m["params"].get("seq", 0) > after_seq
    ]


async def subscribe(client: RpcClient, thread_id: str, **extra: Any) -> None:
    await client.request("thread/subscribe", {"threadId": thread_id, **extra})


@dataclass
class Parked:
    """A turn started on node A by ``clients[0]``, parked waiting for an approval
    that client never answers; every client (one per node) subscribed."""

    nodes: list[Node]
    clients: list[RpcClient]
    approver: Approver
    request: dict[str, Any]
    thread_id: str
    turn_id: str


@asynccontextmanager
async def parked_turn(
    workspace: Path, store: str, text: str = "!echo hold", count: int = 2
) -> AsyncIterator[Parked]:
    async with (
        running_nodes(count, workspace, store, lease=LEASE) as nodes,
        AsyncExitStack() as stack,
    ):
        clients = [
            await stack.enter_async_context(node.connect(node.name.lower())) for node in nodes
        ]
        approver = Approver(clients[0], None)
        thread_id = await new_thread(clients[0])
        for client in clients:
            await subscribe(client, thread_id)
        with anyio.fail_after(20):
            turn_id = await start_turn(clients[0], thread_id, text)
            request = await approver.wait_request()
        yield Parked(nodes, clients, approver, request, thread_id, turn_id)


async def test_a_turn_on_one_node_streams_to_subscribers_on_the_others(
    workspace: Path, postgres_url: str
) -> None:
    async with (
        running_nodes(3, workspace, postgres_url, lease=LEASE) as (a, b, c),
        a.connect("a") as on_a,
        b.connect("b") as on_b,
        c.connect("c") as on_c,
    ):
        thread_id = await new_thread(on_a)
        await subscribe(on_b, thread_id)
        await subscribe(on_c, thread_id)
        words = " ".join(f"word{n}" for n in range(300))
        with anyio.fail_after(20):
            turn_id = await start_turn(on_a, thread_id, words)
            for client in (on_a, on_b, on_c):
                terminal = await wait_terminal(client, turn_id, timeout=20)
                assert terminal["method"] == "turn/completed"
                # ... and the thread's runtime going idle after it.
                await client.notification(
                    "thread/runtimeChanged",
                    where=lambda p, after=terminal["params"]["seq"]: (
                        p["seq"] > after and not p["runtime"]["running"]
                    ),
                )
        first = next(
            e["seq"] for e in thread_events(on_a, thread_id) if e["method"] == "turn/started"
        )
        seen_on_a = thread_events(on_a, thread_id, first - 1)
        deltas = [e for e in seen_on_a if e["method"] == "item/agentMessage/delta"]
        assert len(deltas) > 10
        for client in (on_b, on_c):
            seen = thread_events(client, thread_id, first - 1)
            # Every notification, in seq order, without gap or duplicate.
            assert [e["seq"] for e in seen] == list(range(first, first + len(seen)))
            assert seen == seen_on_a

        # afterSeq replays across nodes: a late client on C gets what A stored.
        async with c.connect("late") as late_c, a.connect("late") as late_a:
            await subscribe(late_c, thread_id, afterSeq=first - 1)
            await subscribe(late_a, thread_id, afterSeq=first - 1)
            await late_c.settle()
            await late_a.settle()
            replayed = thread_events(late_c, thread_id)
            assert replayed and replayed == thread_events(late_a, thread_id)
            assert "turn/completed" in [e["method"] for e in replayed]


async def test_an_approval_answered_on_another_node_resumes_the_turn(
    workspace: Path, postgres_url: str
) -> None:
    async with (
        running_nodes(3, workspace, postgres_url, lease=LEASE) as (a, b, c),
        a.connect("a") as on_a,
        b.connect("b") as on_b,
        c.connect("c") as on_c,
    ):
        silent = Approver(on_a, None)  # A's client sees the question, never answers
        watcher = Approver(on_b, None)
        answerer = Approver(on_c, "accept")
        thread_id = await new_thread(on_a)
        await subscribe(on_b, thread_id)
        await subscribe(on_c, thread_id)
        with anyio.fail_after(20):
            await _until_peers_known(on_a)
            turn_id = await start_turn(on_a, thread_id, "!echo from-the-cluster")
            terminal = await wait_terminal(on_c, turn_id, timeout=20)
            assert terminal["method"] == "turn/completed"
            await wait_terminal(on_a, turn_id)
        assert len(answerer.requests) == 1
        assert len(silent.requests) == 1 and len(watcher.requests) == 1
        request_id = answerer.requests[0]["params"]["requestId"]
        assert silent.requests[0]["params"]["requestId"] == request_id
        items = terminal["params"]["turn"]["items"]
        result = next(i for i in items if i["type"] == "toolResult")
        assert result["payload"]["success"] is True
        assert "from-the-cluster" in result["payload"]["result"]


async def _until_peers_known(client: RpcClient) -> None:
    # The approval asks other nodes once this node's sweep has seen them
    # (every lease/4); a turn started before that is asked on this node only.
    await anyio.sleep(LEASE / 2)
    await client.settle()


async def test_one_running_turn_per_thread_and_interrupt_from_any_node(
    workspace: Path, postgres_url: str
) -> None:
    async with parked_turn(workspace, postgres_url, "!echo wait") as parked:
        on_a, on_b = parked.clients
        thread_id, turn_id = parked.thread_id, parked.turn_id
        with anyio.fail_after(20):
            # B answers thread/read with the flags A announced.
            await on_b.notification(
                "thread/runtimeChanged", where=lambda p: p["runtime"]["waitingOnApproval"]
            )
            read = await on_b.request("thread/read", {"threadId": thread_id})
            assert read["thread"]["runtime"]["running"] is True
            assert read["thread"]["runtime"]["waitingOnApproval"] is True
            failure = await on_b.fail(
                "turn/start",
                {"threadId": thread_id, "input": [{"type": "text", "text": "two"}]},
            )
            assert failure.code == -32012  # a turn is in progress (on node A)
            await on_b.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            terminal = await wait_terminal(on_b, turn_id)
            assert terminal["method"] == "turn/cancelled"
            await wait_terminal(on_a, turn_id)
            # The thread is free again, for a turn on either node.
            next_turn = await start_turn(on_b, thread_id, "after")
            assert (await wait_terminal(on_a, next_turn))["method"] == "turn/completed"


async def test_enqueue_and_steer_from_another_node(workspace: Path, postgres_url: str) -> None:
    async with parked_turn(workspace, postgres_url, "!echo steered") as parked:
        on_b = parked.clients[1]
        thread_id, turn_id = parked.thread_id, parked.turn_id
        with anyio.fail_after(20):
            queued = (
                await on_b.request(
                    "turn/enqueue",
                    {"threadId": thread_id, "input": [{"type": "text", "text": "be brief"}]},
                )
            )["queuedInput"]
            result = await on_b.request(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": queued["id"]},
            )
            assert result["turnId"] == turn_id
            assert [q["status"] for q in result["queuedInputs"]] == ["guidancePending"]
            await parked.approver.answer(parked.request, "accept")
            terminal = await wait_terminal(on_b, turn_id)
        assert terminal["method"] == "turn/completed"
        users = [
            (i["payload"]["text"], i["payload"]["deliveryMode"])
            for i in terminal["params"]["turn"]["items"]
            if i["type"] == "userMessage"
        ]
        assert users == [("!echo steered", "normal"), ("be brief", "guidance")]


async def test_a_killed_node_s_turn_is_failed_by_another_within_the_lease(
    workspace: Path, postgres_url: str
) -> None:
    async with parked_turn(workspace, postgres_url, "!echo hang") as parked:
        on_b = parked.clients[1]
        thread_id, turn_id = parked.thread_id, parked.turn_id
        parked.nodes[0].kill()  # kill -9: no drain, no goodbye
        killed_at = time.monotonic()
        with anyio.fail_after(20):
            terminal = await wait_terminal(on_b, turn_id, timeout=20)
        took = time.monotonic() - killed_at
        assert terminal["method"] == "turn/failed"
        assert "stopped" in terminal["params"]["error"]
        # Within the lease (7/8 of it at most), with room for a busy machine.
        assert took < LEASE * 3, took
        failed = [e for e in thread_events(on_b, thread_id) if e["method"] in ("turn/failed",)]
        assert len(failed) == 1  # one terminal notification
        # The thread is announced idle again (A never will be back to say so).
        await on_b.notification(
            "thread/runtimeChanged",
            where=lambda p, after=terminal["params"]["seq"]: (
                p["seq"] > after and not p["runtime"]["running"]
            ),
        )
        # What completed before the kill is kept; a new turn runs on B.
        stored = await on_b.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        turn = stored["thread"]["turns"][-1]
        assert turn["status"] == "failed"
        assert turn["items"][0]["type"] == "userMessage"
        assert stored["thread"]["runtime"]["running"] is False
        with anyio.fail_after(20):
            again = await start_turn(on_b, thread_id, "again")
            assert (await wait_terminal(on_b, again))["method"] == "turn/completed"


async def test_a_cron_job_due_while_two_nodes_run_fires_once(
    workspace: Path, postgres_url: str
) -> None:
    async with two_nodes(workspace, postgres_url, LEASE) as (_a, _b, on_a, on_b):
        due = int(time.time() * 1000) + 1500
        job = await add_job(on_a, name="once", message="tick", schedule={"kind": "at", "atMs": due})
        with anyio.fail_after(20):
            while True:
                results = [
                    m
                    for client in (on_a, on_b)
                    for m in client.notifications("system/jobResult")
                    if m["params"].get("jobId") == job["id"]
                ]
                if results:
                    break
                await anyio.sleep(0.1)
        # Give the other node every chance to run it a second time.
        await anyio.sleep(LEASE * 2)
        results = [
            m
            for client in (on_a, on_b)
            for m in client.notifications("system/jobResult")
            if m["params"].get("jobId") == job["id"]
        ]
        assert len(results) == 1, results
        thread_id = results[0]["params"]["threadId"]
        stored = await on_b.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert len(stored["thread"]["turns"]) == 1


async def test_a_node_on_another_workspace_directory_is_refused(
    tmp_path: Path, workspace: Path, postgres_url: str
) -> None:
    elsewhere = tmp_path / "not-shared"
    elsewhere.mkdir()
    async with running_nodes(1, workspace, postgres_url, lease=LEASE):
        from tests.support.servers import child_env, server_command

        command = server_command(elsewhere, "--listen", "ws://127.0.0.1:0", "--store", postgres_url)
        result = await anyio.run_process(command, env=child_env(), check=False)
        assert result.returncode == 2
        assert b"must share one workspace directory" in result.stderr


@pytest.mark.parametrize("store", ["sqlite:///elsewhere.db", "bogus://x"])
async def test_store_urls(workspace: Path, store: str) -> None:
    from tests.support.servers import child_env, server_command

    command = server_command(workspace, "--store", store)
    result = await anyio.run_process(command, env=child_env(), check=False, input=b"")
    if store.startswith("bogus"):
        assert result.returncode == 2 and b"unknown store" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert (workspace / "elsewhere.db").exists()


def terminals(client: RpcClient, thread_id: str) -> list[str]:
    return [
        e["method"]
        for e in thread_events(client, thread_id)
        if e["method"] in ("turn/completed", "turn/failed", "turn/cancelled")
    ]


async def test_simultaneous_starts_on_two_nodes_one_wins(
    workspace: Path, postgres_url: str
) -> None:
    async def start(client: RpcClient, thread_id: str, outcomes: list[object]) -> None:
        try:
            outcomes.append(await start_turn(client, thread_id, f"?delay 5\n{client.name}"))
        except RpcFailure as failure:
            outcomes.append(failure.code)

    async with two_nodes(workspace, postgres_url, LEASE) as (_a, _b, on_a, on_b):
        for _ in range(5):
            thread_id = await new_thread(on_a)
            await subscribe(on_a, thread_id)
            outcomes: list[object] = []
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(start, on_a, thread_id, outcomes)
                    tg.start_soon(start, on_b, thread_id, outcomes)
                assert sorted(outcomes, key=str) == sorted(["turn_001", -32012], key=str), outcomes
                await on_a.notification(
                    "turn/completed", where=lambda p, t=thread_id: p["threadId"] == t
                )
            assert terminals(on_a, thread_id) == ["turn/completed"]
            stored = await on_a.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            turns = stored["thread"]["turns"]
            users = [i for t in turns for i in t["items"] if i["type"] == "userMessage"]
            assert len(turns) == 1 and len(users) == 1


async def test_inputs_queued_on_several_nodes_each_run_once(
    workspace: Path, postgres_url: str
) -> None:
    async with parked_turn(workspace, postgres_url, count=3) as parked:
        on_a = parked.clients[0]
        thread_id = parked.thread_id

        async def enqueue(client: RpcClient, text: str) -> None:
            await client.request(
                "turn/enqueue", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
            )

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for client in parked.clients:
                    tg.start_soon(enqueue, client, f"from-{client.name}")
            # Queueing on B and C did not make anyone think the thread idle.
            for client in parked.clients:
                read = await client.request("thread/read", {"threadId": thread_id})
                assert read["thread"]["runtime"]["running"] is True
            await parked.approver.answer(parked.request, "accept")
            await wait_terminal(on_a, parked.turn_id)
            for number in (2, 3, 4):
                assert (await wait_terminal(on_a, f"turn_{number:03d}"))["method"] == (
                    "turn/completed"
                )
        stored = await on_a.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        texts = sorted(t["items"][0]["payload"]["text"] for t in stored["thread"]["turns"][1:])
        assert texts == ["from-a", "from-b", "from-c"]


async def test_rollback_archive_and_delete_from_another_node_respect_the_running_turn(
    workspace: Path, postgres_url: str
) -> None:
    async with parked_turn(workspace, postgres_url) as parked:
        on_a, on_b = parked.clients
        thread_id = parked.thread_id
        with anyio.fail_after(20):
            for method, params in (
                ("thread/rollback", {"threadId": thread_id, "numTurns": 1}),
                ("thread/archive", {"threadId": thread_id}),
            ):
                assert (await on_b.fail(method, params)).code == -32012, method
            # Deleting from B cancels A's turn first, and A's clients hear of both.
            await on_b.request("thread/delete", {"threadId": thread_id})
            terminal = await wait_terminal(on_a, parked.turn_id)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "threadDeleted"
            deleted = await on_a.notification("thread/deleted")
            assert deleted["threadId"] == thread_id


async def test_a_node_taken_for_dead_writes_no_second_end(
    workspace: Path, postgres_url: str
) -> None:
    async with parked_turn(workspace, postgres_url, "!echo park") as parked:
        a, on_b = parked.nodes[0], parked.clients[1]
        with anyio.fail_after(30):
            a.process.send_signal(signal.SIGSTOP)  # a stall past the lease
            try:
                terminal = await wait_terminal(on_b, parked.turn_id, timeout=20)
            finally:
                a.process.send_signal(signal.SIGCONT)
            assert terminal["method"] == "turn/failed"
            # A wakes, finds it was taken for dead, stops its turn: nothing more is written.
            await a.wait_log("taken for dead")
            await on_b.settle()
        assert terminals(on_b, parked.thread_id) == ["turn/failed"]
        stored = await on_b.request(
            "thread/read", {"threadId": parked.thread_id, "includeTurns": True}
        )
        assert stored["thread"]["turns"][-1]["status"] == "failed"


async def test_a_client_subscribing_on_another_node_while_asked_is_asked(
    workspace: Path, postgres_url: str
) -> None:
    async with (
        running_nodes(2, workspace, postgres_url, lease=LEASE) as (a, b),
        a.connect("a") as on_a,
    ):
        silent = Approver(on_a, None)
        thread_id = await new_thread(on_a)
        with anyio.fail_after(20):
            await _until_peers_known(on_a)
            turn_id = await start_turn(on_a, thread_id, "!echo late")
            await silent.wait_request()
            async with b.connect("late") as on_b:
                answerer = Approver(on_b, "accept")
                await subscribe(on_b, thread_id)
                await answerer.wait_request()
                terminal = await wait_terminal(on_a, turn_id)
        assert terminal["method"] == "turn/completed"
