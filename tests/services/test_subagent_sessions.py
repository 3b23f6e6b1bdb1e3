"""``subagent/children/list``, ``subagent/close``, ``subagent/resume`` and
``subagent/graphChanged``: the session methods of SubAgent child threads, over
every transport and store."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.conftest import BOTH_STORES
from tests.runtime.test_subagents import call, spawn, tool_answer
from tests.support.client import RpcClient, RpcFailure
from tests.support.servers import ServerUnderTest
from tests.support.turns import new_thread, run_turn, wait_event

STORES = BOTH_STORES


async def spawned(client: RpcClient, parent: str, prompt: str) -> str:
    """Spawn a child of ``parent`` and wait until its first turn ended."""
    turn_id, _ = await run_turn(client, parent, spawn(prompt, agentNickname=prompt))
    child = str((await tool_answer(client, parent, turn_id))["childThreadId"])
    turn_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
    assert (await tool_answer(client, parent, turn_id))["status"] == "completed"
    return child


async def refused(client: RpcClient, method: str, params: dict[str, Any]) -> RpcFailure:
    with pytest.raises(RpcFailure) as failure:
        await client.request(method, params)
    return failure.value


async def test_list_close_and_resume_a_child(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect(initialize=False) as client:
            assert (await client.initialize())["capabilities"]["subAgentSessions"] is True
            parent = await new_thread(client)
            mark = client.mark()
            child = await spawned(client, parent, "alpha")
            changed = await wait_event(client, "subagent/graphChanged", start=mark)
            assert changed == {"parentThreadId": parent, "childThreadId": child}

            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            (entry,) = listed["data"]
            edge = entry["edge"]
            assert edge["parentThreadId"] == parent and edge["childThreadId"] == child
            assert edge["status"] == "open" and edge["depth"] == 1
            assert edge["agentNickname"] == "alpha" and edge["profileName"] == "native"
            assert "thread" not in entry or entry["thread"] is None

            with_threads = await client.request(
                "subagent/children/list", {"parentThreadId": parent, "includeThreads": True}
            )
            thread = with_threads["data"][0]["thread"]
            assert thread["id"] == child and thread["source"]["kind"] == "subagent"
            assert not thread.get("turns")

            mark = client.mark()
            closed = await client.request(
                "subagent/close", {"parentThreadId": parent, "childThreadId": child}
            )
            assert closed["childThreadId"] == child and closed["status"] == "closed"
            assert closed["agentNickname"] == "alpha" and closed["supportsResume"] is True
            assert "message" not in closed
            changed = await wait_event(client, "subagent/graphChanged", start=mark)
            assert changed == {"parentThreadId": parent, "childThreadId": child}
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert listed["data"] == []
            listed = await client.request(
                "subagent/children/list", {"parentThreadId": parent, "includeClosed": True}
            )
            assert [e["edge"]["status"] for e in listed["data"]] == ["closed"]

            mark = client.mark()
            resumed = await client.request(
                "subagent/resume", {"parentThreadId": parent, "childThreadId": child}
            )
            assert resumed["status"] == "open"
            await wait_event(client, "subagent/graphChanged", start=mark)
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert [e["edge"]["status"] for e in listed["data"]] == ["open"]


async def test_children_are_listed_newest_change_first(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            first = await spawned(client, parent, "first")
            second = await spawned(client, parent, "second")
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert [e["edge"]["childThreadId"] for e in listed["data"]] == [second, first]
            # Resuming touches the edge (an open edge stays open, and is announced).
            mark = client.mark()
            await client.request(
                "subagent/resume", {"parentThreadId": parent, "childThreadId": first}
            )
            await wait_event(client, "subagent/graphChanged", start=mark)
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert [e["edge"]["childThreadId"] for e in listed["data"]] == [first, second]


async def test_session_method_errors(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            child = await spawned(client, parent, "gamma")
            for params in ({}, {"parentThreadId": "  "}):
                failure = await refused(client, "subagent/children/list", params)
                assert failure.code == -32602
                assert failure.data["detail"] == "'parentThreadId' is required."
            # An unknown parent has no children.
            unknown = {"parentThreadId": "thr_nobody"}
            assert await client.request("subagent/children/list", unknown) == {"data": []}
            for method in ("subagent/close", "subagent/resume"):
                failure = await refused(client, method, {"childThreadId": child})
                assert failure.data["detail"] == "'parentThreadId' is required."
                failure = await refused(client, method, {"parentThreadId": parent})
                assert failure.code == -32602
                assert failure.data["detail"] == "'childThreadId' is required."
                failure = await refused(
                    client, method, {"parentThreadId": parent, "childThreadId": "thr_nobody"}
                )
                assert failure.code == -32010
                # A thread that is no one's child: -32602.
                failure = await refused(
                    client, method, {"parentThreadId": child, "childThreadId": parent}
                )
                assert failure.code == -32602
            # The given parent is only checked for presence: the recorded one is used.
            closed = await client.request(
                "subagent/close", {"parentThreadId": "thr_other", "childThreadId": child}
            )
            assert closed["status"] == "closed"


async def test_a_child_is_managed_through_its_parent(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            child = await spawned(client, parent, "delta")
            for method, verb in (
                ("thread/archive", "archived"),
                ("thread/unarchive", "unarchived"),
                ("thread/delete", "deleted"),
            ):
                failure = await refused(client, method, {"threadId": child})
                assert failure.code == -32602
                assert failure.data["detail"] == (
                    f"SubAgent child thread '{child}' cannot be {verb} directly; "
                    f"manage its parent thread '{parent}' instead."
                )
            read = await client.request("thread/read", {"threadId": child})
            assert read["thread"]["status"] == "active"


async def test_archiving_and_deleting_a_parent_takes_its_subtree(
    server: ServerUnderTest,
) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            open_child = await spawned(client, parent, "open one")
            closed_child = await spawned(client, parent, "closed one")
            pair = {"parentThreadId": parent, "childThreadId": closed_child}
            await client.request("subagent/close", pair)

            await client.request("thread/archive", {"threadId": parent})
            for thread_id in (parent, open_child, closed_child):
                read = await client.request("thread/read", {"threadId": thread_id})
                assert read["thread"]["status"] == "archived", thread_id
            failure = await refused(client, "subagent/resume", pair)
            assert failure.code == -32011

            await client.request("thread/unarchive", {"threadId": parent})
            for thread_id in (parent, open_child, closed_child):
                read = await client.request("thread/read", {"threadId": thread_id})
                assert read["thread"]["status"] == "active", thread_id
            assert (await client.request("subagent/resume", pair))["status"] == "open"

            if server.kind == "stdio":  # one client per process: no one else to tell
                await client.request("thread/delete", {"threadId": parent})
            else:
                async with server.connect("watcher") as watcher:
                    mark = watcher.mark()
                    await client.request("thread/delete", {"threadId": parent})
                    await wait_event(
                        watcher, "thread/deleted", lambda p: p["threadId"] == parent, start=mark
                    )
                    order = [
                        m["params"]["threadId"]
                        for m in watcher.messages[mark:]
                        if m.get("method") == "thread/deleted"
                    ]
                    # Leaves first: the parent's own announcement comes last.
                    assert sorted(order[:-1]) == sorted([open_child, closed_child])
                    assert order[-1] == parent
            for thread_id in (parent, open_child, closed_child):
                failure = await refused(client, "thread/read", {"threadId": thread_id})
                assert failure.code == -32010
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert listed == {"data": []}
