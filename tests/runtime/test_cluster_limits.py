"""The cluster's remaining edges, closed or pinned as docs/scale-out.md states
them (issue 32): an in-process node (whose state a test can look at) beside
real node processes, on one real PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from appserver.runtime.cluster import ClusterNode
from appserver.runtime.turns import EngineConfig
from tests.support.client import RpcClient
from tests.support.cluster import Node, running_nodes
from tests.support.helpers import start_thread
from tests.support.turns import Approver, new_thread, run_turn, start_turn, wait_terminal

LEASE = 1.0  # seconds; the default is 10


@asynccontextmanager
async def beside_a_process(
    workspace: Path,
    postgres_url: str,
    engine: EngineConfig | None = None,
    capabilities: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[ClusterNode, RpcClient, Node, RpcClient]]:
    """Node A in this process (its ClusterNode and a client), node B a process
    (and a client). ``engine``: A's settings (its lease is always ``LEASE``);
    ``capabilities``: those of A's client."""
    from tests.support.servers import running_server

    engine = engine or EngineConfig()
    engine.node_lease = LEASE
    async with (
        running_server("memory", workspace, store=postgres_url, engine=engine) as sut,
        running_nodes(1, workspace, postgres_url, lease=LEASE, first="B") as (b,),
        sut.connect(capabilities=capabilities) as on_a,
        b.connect("b") as on_b,
    ):
        assert sut.app is not None and sut.app.runtime.cluster is not None
        yield sut.app.runtime.cluster, on_a, b, on_b


def idle_on(client: RpcClient, thread_id: str) -> bool:
    return any(
        m["params"]["threadId"] == thread_id and not m["params"]["runtime"]["running"]
        for m in client.notifications("thread/runtimeChanged")
    )


async def test_a_node_keeps_no_delivery_state_of_threads_nobody_there_follows(
    workspace: Path, postgres_url: str
) -> None:
    async with beside_a_process(workspace, postgres_url) as (node, on_a, _b, on_b):
        journal = node.journal
        threads = []
        with anyio.fail_after(30):
            for _ in range(4):
                thread_id = await new_thread(on_b)
                await run_turn(on_b, thread_id, "?stream 3", timeout=15)
                threads.append(thread_id)
            # A delivered every broadcast of them (thread/started, runtimeChanged)...
            await on_a.wait(lambda m: idle_on(on_a, threads[-1]))
            # ...and keeps nothing of them once delivered and announced (an event
            # read ahead of its notification keeps its feed until that arrives).
            while set(threads) & set(node.shared.kept()):
                await anyio.sleep(0.01)
        assert not set(threads) & set(journal._locks)
        # A subscriber keeps its thread followed; once it goes, the thread is forgotten.
        await on_a.request("thread/subscribe", {"threadId": threads[0]})
        assert threads[0] in node.shared.followed()
        await on_a.request("thread/unsubscribe", {"threadId": threads[0]})
        node.shared.drop_idle()
        assert threads[0] not in node.shared.kept()


async def test_a_broadcast_announced_after_this_node_began_following_is_delivered(
    workspace: Path, postgres_url: str
) -> None:
    async with beside_a_process(workspace, postgres_url) as (node, on_a, _b, on_b):
        watched = await new_thread(on_b)
        with anyio.fail_after(20):
            await on_a.notification("thread/started", where=lambda p: p["thread"]["id"] == watched)
        # B's notifications about the thread are held back on their way to A (a
        # slow network), while A writes an event of its own there.
        held: list[tuple[str, int, int, str, bool]] = []
        arrived = anyio.Event()
        deliver = node.on_events

        def hold(thread_id: str, first: int, last: int, node: str, broadcast: bool) -> None:
            if thread_id != watched:
                deliver(thread_id, first, last, node, broadcast)
                return
            held.append((thread_id, first, last, node, broadcast))
            arrived.set()

        node.on_events = hold  # type: ignore[method-assign]
        with anyio.fail_after(20):
            await run_turn(on_b, watched, "?stream 2", timeout=15)
            idle = await on_b.notification(
                "thread/runtimeChanged",
                where=lambda p: p["threadId"] == watched and not p["runtime"]["running"],
            )
            while not held or held[-1][2] < idle["seq"]:
                await arrived.wait()
                arrived = anyio.Event()
            await on_a.request("thread/rename", {"threadId": watched, "displayName": "mine"})
            await on_a.notification("thread/renamed", where=lambda p: p["threadId"] == watched)
            node.on_events = deliver  # type: ignore[method-assign]
            for announcement in held:
                deliver(*announcement)
            # B's broadcasts (the thread running, then idle) still reach A's client.
            await on_a.wait(lambda m: idle_on(on_a, watched))
        seen = [
            (m["method"], m["params"]["seq"])
            for m in on_a.notifications()
            if m["params"].get("threadId") == watched
        ]
        assert len({seq for _, seq in seen}) == len(seen)  # nothing twice
        # B's own broadcasts from before A's rename reached A's client too: the
        # thread's first title (B named it from the turn's input) and its flags.
        renamed = sorted(seq for method, seq in seen if method == "thread/renamed")
        assert len(renamed) == 2
        assert ("thread/runtimeChanged", idle["seq"]) in seen


async def test_an_accept_for_session_holds_on_every_node(
    workspace: Path, postgres_url: str
) -> None:
    async with beside_a_process(workspace, postgres_url) as (node, on_a, _b, on_b):
        asked_on_b = Approver(on_b, "acceptForSession")
        asked_on_a = Approver(on_a, None)
        thread_id = await new_thread(on_b)
        await on_a.request("thread/subscribe", {"threadId": thread_id})
        told = anyio.Event()
        take_grant = node.commands["approval/grant"]

        async def noted(body: dict[str, Any]) -> None:
            await take_grant(body)
            told.set()

        node.commands["approval/grant"] = noted
        with anyio.fail_after(30):
            # Granted for the session on B (B runs the turn, its client answers)...
            _turn, ended = await run_turn(on_b, thread_id, "!echo same", timeout=20)
            assert ended["method"] == "turn/completed"
            await told.wait()
            # ...so the same command in a turn on A is not asked again.
            _turn, ended = await run_turn(on_a, thread_id, "!echo same", timeout=20)
        assert ended["method"] == "turn/completed"
        assert len(asked_on_b.requests) == 1
        assert len(asked_on_a.requests) == 1  # the first question, seen on A too


async def test_broadcasts_sent_while_the_feed_was_down_are_delivered_once(
    workspace: Path, postgres_url: str
) -> None:
    async with beside_a_process(workspace, postgres_url) as (node, on_a, _b, on_b):
        before = await new_thread(on_b)
        with anyio.fail_after(20):
            await on_a.notification("thread/started", where=lambda p: p["thread"]["id"] == before)
        # A's LISTEN connection drops: what B announces meanwhile never reaches A.
        node.on_lost()
        never: list[tuple[str, int, int, str, bool]] = []
        arrived = anyio.Event()
        deliver = node.on_events

        def drop(thread_id: str, first: int, last: int, node: str, broadcast: bool) -> None:
            never.append((thread_id, first, last, node, broadcast))
            arrived.set()

        node.on_events = drop  # type: ignore[method-assign]
        with anyio.fail_after(20):
            during = await new_thread(on_b)
            await on_b.request("thread/rename", {"threadId": during, "displayName": "meanwhile"})
            while not any(thread == during and first > 1 for thread, first, *_ in never):
                await arrived.wait()
                arrived = anyio.Event()
            node.on_events = deliver  # type: ignore[method-assign]
            node.on_reconnect()
            await on_a.notification("thread/renamed", where=lambda p: p["threadId"] == during)
            await on_a.settle()
        started = [m["params"]["thread"]["id"] for m in on_a.notifications("thread/started")]
        assert started.count(before) == started.count(during) == 1


async def test_client_tools_and_terminals_stay_on_the_node_that_runs_the_turn(
    workspace: Path, postgres_url: str
) -> None:
    # docs/scale-out.md "What stays per node": a server->client request of a
    # turn goes to the clients of the node that runs it, and a background
    # terminal is a process of the node whose turn started it.
    async with beside_a_process(workspace, postgres_url) as (_node, on_a, _b, on_b):
        calls: dict[str, list[Any]] = {"a": [], "b": []}

        def host(name: str) -> Any:
            def answer(method: str, params: Any) -> Any:
                calls[name].append((method, params))
                return {"success": True, "contentItems": [{"type": "text", "text": name}]}

            return answer

        on_a.on_server_request = host("a")
        on_b.on_server_request = host("b")
        tools = [{"namespace": "ide", "name": "lookup", "description": "A.", "inputSchema": {}}]
        thread = await start_thread(
            on_b, dynamicTools=tools, config={"approvalPolicy": "autoApprove"}
        )
        thread_id = str(thread["id"])
        await on_a.request("thread/subscribe", {"threadId": thread_id})
        with anyio.fail_after(30):
            # The turn runs on A: the tool B's client declared is called on A's client.
            _turn, ended = await run_turn(on_a, thread_id, '?tool ide__lookup {"word": "x"}')
            assert ended["method"] == "turn/completed"
            assert [method for method, _ in calls["a"]] == ["item/tool/call"]
            assert calls["b"] == []
            # A background terminal the turn on A starts is a process of A's: B
            # reports it running (its output from the shared file) and leaves it to A.
            _turn, ended = await run_turn(
                on_a, thread_id, '?tool shell {"command": "sleep 30", "run_in_background": true}'
            )
            assert ended["method"] == "turn/completed"
            listed = (await on_a.request("terminal/list", {"threadId": thread_id}))["terminals"]
            session = {"sessionId": listed[0]["sessionId"]}
            on_b_listed = await on_b.request("terminal/list", {"threadId": thread_id})
            assert [t["status"] for t in on_b_listed["terminals"]] == ["running"]
            assert (await on_b.request("terminal/read", session))["terminal"]["status"] == "running"
            refused = await on_b.fail("terminal/stop", session)
            assert "another server process" in refused.data["detail"]
            refused = await on_b.fail("terminal/write", {**session, "input": "x"})
            assert refused.code == -32091
            stopped = await on_a.request("terminal/stop", session)
            assert stopped["terminal"]["status"] == "killed"
        listed = (await on_b.request("terminal/list", {"threadId": thread_id}))["terminals"]
        assert [t["status"] for t in listed] == ["killed"]


async def test_an_approval_put_to_a_node_that_dies_ends_without_its_answer(
    workspace: Path, postgres_url: str
) -> None:
    engine = EngineConfig(approval_timeout=120, reconnect_grace=0.5)
    mute = {"approvalSupport": False}  # A's client cannot answer approvals
    async with beside_a_process(workspace, postgres_url, engine, mute) as (_node, on_a, b, on_b):
        silent = Approver(on_b, None)  # B's client is asked and never answers
        thread_id = await new_thread(on_b)
        await on_b.request("thread/subscribe", {"threadId": thread_id})
        with anyio.fail_after(20):
            turn_id = await start_turn(on_a, thread_id, "!echo orphan")
            await silent.wait_request()
            b.kill()
            # Not the 120 s timeout: B's death ends its part, and with nobody
            # left to ask, the reconnect grace decides.
            terminal = await wait_terminal(on_a, turn_id, timeout=LEASE * 10)
        items = terminal["params"]["turn"]["items"]
        errors = [item["payload"] for item in items if item["type"] == "error"]
        assert any("did not come back" in str(error) for error in errors), items
