"""SubAgent child threads made by the agent-control tools, over every transport and store."""

from __future__ import annotations

import json
from typing import Any

import anyio

from tests.conftest import BOTH_STORES
from tests.support.helpers import IDENTITY
from tests.support.servers import ServerUnderTest
from tests.support.turns import (
    Approver,
    new_thread,
    run_turn,
    start_turn,
    wait_event,
    wait_terminal,
)

STORES = BOTH_STORES


def spawn(prompt: str, **extra: Any) -> str:
    return "?tool SpawnAgent " + json.dumps({"agentPrompt": prompt, **extra})


def call(tool: str, **arguments: Any) -> str:
    return f"?tool {tool} " + json.dumps(arguments)


async def tool_answer(client: Any, thread_id: str, turn_id: str) -> dict[str, Any]:
    result = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    (turn,) = [turn for turn in result["thread"]["turns"] if turn["id"] == turn_id]
    (item,) = [item for item in turn["items"] if item["type"] == "toolResult"]
    payload = item["payload"]
    assert payload["success"], payload
    answer: dict[str, Any] = json.loads(payload["result"])
    return answer


async def test_a_parent_spawns_two_children_and_waits_for_their_text(
    server: ServerUnderTest,
) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            children = []
            for name in ("alpha", "beta"):
                turn_id, terminal = await run_turn(client, parent, spawn(f"report {name}"))
                assert terminal["method"] == "turn/completed"
                answer = await tool_answer(client, parent, turn_id)
                assert answer["status"] == "running" and answer["agentNickname"] == f"report {name}"
                assert answer["profileName"] == "native" and answer["supportsSendInput"] is True
                children.append(answer["childThreadId"])
            for name, child in zip(("alpha", "beta"), children, strict=True):
                turn_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
                answer = await tool_answer(client, parent, turn_id)
                assert answer["status"] == "completed"
                assert answer["message"] == f"You said: report {name}"
            read = await client.request("thread/read", {"threadId": children[0]})
            source = read["thread"]["source"]
            assert source["kind"] == "subagent"
            assert source["subAgent"]["parentThreadId"] == parent
            assert source["subAgent"]["rootThreadId"] == parent
            assert source["subAgent"]["depth"] == 1
            assert read["thread"]["originChannel"] == "subagent"
            assert read["thread"]["channelContext"] == parent


async def test_a_child_at_the_depth_limit_cannot_spawn(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            turn_id, _ = await run_turn(
                client, parent, spawn(spawn("grandchild"), agentRole="worker", agentNickname="w")
            )
            child = (await tool_answer(client, parent, turn_id))["childThreadId"]
            turn_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
            answer = await tool_answer(client, parent, turn_id)
            # The worker at depth 1 is not offered SpawnAgent; its call fails.
            assert answer["status"] == "completed"
            assert "SpawnAgent" in answer["message"] and "failed" in answer["message"]
            read = await client.request("thread/read", {"threadId": child})
            config = read["thread"]["configuration"]
            assert config["agentControlToolAccess"] == "allowList"
            assert "SpawnAgent" not in config["allowedAgentControlTools"]
            assert "WaitAgent" in config["allowedAgentControlTools"]


async def test_depth_limit_message(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            # A thread that claims depth 1 (as a child would) cannot spawn past MaxDepth 1.
            parent = await new_thread(client, agentControlToolAccess="full")
            turn_id, _ = await run_turn(client, parent, spawn("x", agentRole="nobody"))
            read = await client.request("thread/read", {"threadId": parent, "includeTurns": True})
            (turn,) = [t for t in read["thread"]["turns"] if t["id"] == turn_id]
            (item,) = [i for i in turn["items"] if i["type"] == "toolResult"]
            assert item["payload"]["success"] is False
            assert "Unknown subagent role 'nobody'" in item["payload"]["result"]


async def test_a_childs_approval_reaches_the_parents_client(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            approver = Approver(client, "accept")
            parent = await new_thread(client)
            turn_id, _ = await run_turn(
                client, parent, spawn("!touch child.txt", agentNickname="t")
            )
            child = (await tool_answer(client, parent, turn_id))["childThreadId"]
            request = await approver.wait_request()
            params = request["params"]
            assert params["threadId"] == child
            assert params["subAgent"] == {
                "childThreadId": child,
                "parentThreadId": parent,
                "rootThreadId": parent,
                "agentNickname": "t",
            }
            turn_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
            assert (await tool_answer(client, parent, turn_id))["status"] == "completed"


async def test_interrupting_the_parent_cancels_its_running_child(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            Approver(client, None)  # never answers: the child waits on its approval
            parent = await new_thread(client)
            mark = client.mark()
            script = spawn("!touch slow.txt", agentNickname="slow")
            turn_id = await start_turn(client, parent, script + "\n")
            started = await wait_event(
                client, "thread/started", lambda p: p["thread"]["id"] != parent, start=mark
            )
            child = started["thread"]["id"]
            await wait_terminal(client, turn_id, start=mark, thread_id=parent)
            # The spawning turn completed: the child keeps running (waiting on approval).
            wait_turn = await start_turn(client, parent, call("WaitAgent", childThreadId=child))
            await client.request("turn/interrupt", {"threadId": parent, "turnId": wait_turn})
            terminal = await wait_terminal(client, wait_turn, start=mark, thread_id=parent)
            assert terminal["method"] == "turn/cancelled"
            await client.notification(
                "turn/cancelled", start=mark, where=lambda p: p["turn"]["threadId"] == child
            )


async def test_send_input_close_resume_and_a_wait_that_times_out(server: ServerUnderTest) -> None:
    """The other four tools on one child: another message, a bounded wait on a
    turn that waits for an approval nobody gives, close (cancels it), reopen."""
    with anyio.fail_after(60):
        async with server.connect() as client:
            approver = Approver(client, None)  # never answers
            parent = await new_thread(client)

            async def tool(script: str) -> dict[str, Any]:
                turn_id, _ = await run_turn(client, parent, script)
                return await tool_answer(client, parent, turn_id)

            child = (await tool(spawn("first words", agentNickname="c")))["childThreadId"]
            waited = await tool(call("WaitAgent", childThreadId=child))
            assert (waited["status"], waited["message"]) == ("completed", "You said: first words")
            sent = await tool(call("SendInput", childThreadId=child, message="!touch late.txt"))
            assert sent["status"] == "running" and sent["childThreadId"] == child
            await approver.wait_request()  # the child's second turn waits on it
            waited = await tool(call("WaitAgent", childThreadId=child, timeoutSeconds=0.2))
            assert waited["status"] == "timeout"
            closed = await tool(call("CloseAgent", childThreadId=child))
            assert closed["status"] == "closed"
            read = await client.request("thread/read", {"threadId": child, "includeTurns": True})
            statuses = [turn["status"] for turn in read["thread"]["turns"]]
            assert statuses == ["completed", "cancelled"]
            reopened = await tool(call("ResumeAgent", childThreadId=child))
            assert reopened["status"] == "open"


async def test_thread_list_includes_children_by_user_when_asked(server: ServerUnderTest) -> None:
    """Children match on the workspace and user only (their channel context is the
    parent's id), and only with ``includeSubAgents`` (dotcraft-parity-2 §2.9)."""
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            turn_id, _ = await run_turn(client, parent, spawn("report"))
            child = (await tool_answer(client, parent, turn_id))["childThreadId"]
            identity = {**IDENTITY}

            async def listed(**extra: Any) -> set[str]:
                result = await client.request("thread/list", {"identity": identity, **extra})
                return {thread["id"] for thread in result["data"]}

            assert await listed() == {parent}
            assert await listed(includeSubAgents=True) == {parent, child}
            identity["userId"] = "someone-else"
            assert child not in await listed(includeSubAgents=True)
