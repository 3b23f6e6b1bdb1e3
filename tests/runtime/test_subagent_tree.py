"""The SubAgent tree as clients watch it: progress snapshots, a parent's view of
its children, roles, grandchildren, closing a running child, and a restart."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio

from tests.conftest import BOTH_STORES
from tests.runtime.test_subagents import call, spawn, tool_answer
from tests.services.test_subagent_sessions import refused
from tests.support.client import RpcClient
from tests.support.cluster import two_nodes
from tests.support.fake_models import (
    fake_model_server,
    openai_chunk,
    openai_stream,
    openai_text_reply,
)
from tests.support.processes import ws_client, ws_server
from tests.support.servers import ServerUnderTest
from tests.support.turns import new_thread, run_turn, start_turn, wait_count, wait_event

STORES = BOTH_STORES
CHAT = "POST /v1/chat/completions"


def progress_of(client: RpcClient, turn_id: str, start: int = 0) -> list[dict[str, Any]]:
    return [
        m["params"]
        for m in client.messages[start:]
        if m.get("method") == "subagent/progress" and m["params"]["turnId"] == turn_id
    ]


def terminal_index(client: RpcClient, thread_id: str, turn_id: str) -> int:
    # Turn ids repeat across threads (the child's first turn is turn_001 too).
    return next(
        index
        for index, m in enumerate(client.messages)
        if m.get("method") in ("turn/completed", "turn/failed", "turn/cancelled")
        and (m["params"]["turn"]["threadId"], m["params"]["turn"]["id"]) == (thread_id, turn_id)
    )


def last_progress_index(client: RpcClient, turn_id: str) -> int:
    return max(
        index
        for index, m in enumerate(client.messages)
        if m.get("method") == "subagent/progress" and m["params"]["turnId"] == turn_id
    )


async def test_progress_the_parents_view_and_the_explorer_role(server: ServerUnderTest) -> None:
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            look = '?tool list_dir {"path": "."}'
            turn_id, _ = await run_turn(
                client, parent, spawn(look, agentNickname="scout", agentRole="explorer")
            )
            child = (await tool_answer(client, parent, turn_id))["childThreadId"]
            # The spawning turn's last snapshot comes before its own end.
            (entry,) = progress_of(client, turn_id)[-1]["entries"]
            assert entry["label"] == "scout" and entry["childThreadId"] == child
            assert progress_of(client, turn_id)[-1]["threadId"] == parent
            assert last_progress_index(client, turn_id) < terminal_index(client, parent, turn_id)
            # ... and after the parent's last answer (its usage and items come first).
            answered = max(
                index
                for index, m in enumerate(client.messages)
                if m.get("method") == "item/completed"
                and (m["params"]["threadId"], m["params"]["turnId"]) == (parent, turn_id)
                and m["params"]["item"]["type"] == "agentMessage"
            )
            assert answered < last_progress_index(client, turn_id)

            # A turn waiting on the child follows it to its end.
            wait_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
            assert (await tool_answer(client, parent, wait_id))["status"] == "completed"
            (entry,) = progress_of(client, wait_id)[-1]["entries"]
            assert entry["isCompleted"] is True and entry["label"] == "scout"
            assert (entry["currentTool"], entry["currentToolDisplay"]) == ("list_dir", ".")
            assert entry["inputTokens"] > 0 and entry["outputTokens"] > 0
            assert last_progress_index(client, wait_id) < terminal_index(client, parent, wait_id)

            # The parent's thread/read lists its children with their summaries.
            read = await client.request("thread/read", {"threadId": parent})
            (summary,) = read["subAgents"]
            assert summary["edge"]["childThreadId"] == child
            assert summary["edge"]["agentRole"] == "explorer"
            assert summary["thread"]["id"] == child and summary["thread"]["turnCount"] == 1
            assert summary["thread"]["displayName"] == "scout"
            assert "subAgents" not in (await client.request("thread/read", {"threadId": child}))

            # The explorer only reads: writing is not among its tools.
            config = (await client.request("thread/read", {"threadId": child}))["thread"][
                "configuration"
            ]
            assert "read_file" in config["toolAllowList"]
            assert "write_file" not in config["toolAllowList"]
            assert config["agentControlToolAccess"] == "disabled"
            turn_id, _ = await run_turn(
                client, parent, spawn(">notes.txt\nhello", agentRole="explorer")
            )
            writer = (await tool_answer(client, parent, turn_id))["childThreadId"]
            turn_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=writer))
            answer = await tool_answer(client, parent, turn_id)
            assert "write_file" in answer["message"] and "not available" in answer["message"]
            assert not (server.workspace / "notes.txt").exists()


def allow_depth(workspace: Path, depth: int) -> None:
    """``SubAgent.MaxDepth`` in the workspace's config.json (other keys kept)."""
    path = workspace / ".craft" / "config.json"
    path.parent.mkdir(exist_ok=True)
    config = json.loads(path.read_text()) if path.exists() else {}
    config.setdefault("SubAgent", {})["MaxDepth"] = depth
    path.write_text(json.dumps(config))


async def test_grandchildren_and_closing_a_running_one(server: ServerUnderTest) -> None:
    allow_depth(server.workspace, 2)
    with anyio.fail_after(40):
        async with server.connect() as client:
            parent = await new_thread(client)
            mark = client.mark()
            slow = spawn("?stream 2000\n?delay 20", agentNickname="grandchild")
            turn_id, _ = await run_turn(
                client, parent, spawn(slow, agentRole="worker", agentNickname="child")
            )
            child = (await tool_answer(client, parent, turn_id))["childThreadId"]
            started = await wait_event(
                client,
                "thread/started",
                lambda p: p["thread"]["displayName"] == "grandchild",
                start=mark,
            )
            grandchild = started["thread"]["id"]
            block = started["thread"]["source"]["subAgent"]
            assert (block["parentThreadId"], block["rootThreadId"]) == (child, parent)
            assert block["depth"] == 2
            listed = await client.request("subagent/children/list", {"parentThreadId": child})
            assert [entry["edge"]["childThreadId"] for entry in listed["data"]] == [grandchild]

            # The grandchild streams; closing it cancels its turn and closes the edge.
            await wait_count(
                client,
                lambda m: (
                    m.get("method") == "item/agentMessage/delta"
                    and m["params"]["threadId"] == grandchild
                ),
                3,
            )
            closed = await client.request(
                "subagent/close", {"parentThreadId": child, "childThreadId": grandchild}
            )
            assert closed["status"] == "closed"
            await wait_event(
                client,
                "turn/cancelled",
                lambda p: p["turn"]["threadId"] == grandchild,
                start=mark,
            )
            listed = await client.request(
                "subagent/children/list", {"parentThreadId": child, "includeClosed": True}
            )
            assert [entry["edge"]["status"] for entry in listed["data"]] == ["closed"]

            # Deleting the root (once the child's turn is done) takes the whole tree.
            await wait_event(
                client, "turn/completed", lambda p: p["turn"]["threadId"] == child, start=mark
            )
            await client.request("thread/delete", {"threadId": parent})
            for thread_id in (parent, child, grandchild):
                failure = await refused(client, "thread/read", {"threadId": thread_id})
                assert failure.code == -32010


async def test_a_restart_mid_child_is_what_wait_agent_reports(workspace: Path) -> None:
    with anyio.fail_after(60):
        async with ws_server(workspace) as (process, url), ws_client(url) as client:
            parent = await new_thread(client)
            turn_id = await start_turn(client, parent, spawn("?stream 2000\n?delay 20"))
            started = await wait_event(
                client, "thread/started", lambda p: p["thread"]["id"] != parent
            )
            child = started["thread"]["id"]
            await wait_count(
                client,
                lambda m: (
                    m.get("method") == "item/agentMessage/delta"
                    and m["params"]["threadId"] == child
                ),
                30,
            )
            process.send_signal(signal.SIGKILL)
            with anyio.fail_after(10):
                await process.wait()
        assert turn_id

        async with ws_server(workspace) as (_, url), ws_client(url, "after") as client:
            turn_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
            answer = await tool_answer(client, parent, turn_id)
            assert answer["status"] == "failed"
            assert "server stopped" in answer["message"]


async def test_another_node_sees_and_closes_a_child(workspace: Path, postgres_url: str) -> None:
    """Two nodes on one PostgreSQL: a child spawned on A is listed, read and
    closed from B (its turn on A is cancelled), and a turn on B waits on it."""
    async with two_nodes(workspace, postgres_url, 1.0) as (_node_a, _node_b, on_a, on_b):
        with anyio.fail_after(30):
            parent = await new_thread(on_a)
            mark = on_a.mark()
            turn_id, _ = await run_turn(
                on_a, parent, spawn("?stream 3000\n?delay 20", agentNickname="far")
            )
            child = (await tool_answer(on_a, parent, turn_id))["childThreadId"]
            await wait_count(
                on_a,
                lambda m: (
                    m.get("method") == "item/agentMessage/delta"
                    and m["params"]["threadId"] == child
                ),
                3,
            )
            # B takes the child's runtime flags from A's broadcast, once it has read it.
            await on_b.wait(
                lambda m: (
                    m.get("method") == "thread/runtimeChanged"
                    and m["params"]["threadId"] == child
                    and m["params"]["runtime"]["running"]
                )
            )
            listed = await on_b.request("subagent/children/list", {"parentThreadId": parent})
            assert [entry["edge"]["childThreadId"] for entry in listed["data"]] == [child]
            read = await on_b.request("thread/read", {"threadId": parent})
            assert read["subAgents"][0]["thread"]["runtime"]["running"] is True

            closed = await on_b.request(
                "subagent/close", {"parentThreadId": parent, "childThreadId": child}
            )
            assert closed["status"] == "closed"
            await wait_event(
                on_a, "turn/cancelled", lambda p: p["turn"]["threadId"] == child, start=mark
            )
            turn_id, _ = await run_turn(on_b, parent, call("WaitAgent", childThreadId=child))
            assert (await tool_answer(on_b, parent, turn_id))["status"] == "cancelled"


async def test_a_provider_streams_the_spawn_and_the_child(server: ServerUnderTest) -> None:
    """A real Chat Completions stream (the fake OpenAI server) calls SpawnAgent; the
    child's own request carries its role and no agent-control tool, and its
    tokens reach the parent turn's last progress."""
    spawn_call = openai_stream(
        [
            openai_chunk({"role": "assistant", "content": None}),
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_spawn",
                            "type": "function",
                            "function": {"name": "SpawnAgent", "arguments": ""},
                        }
                    ]
                }
            ),
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "function": {
                                "arguments": '{"agentPrompt": "count the files",'
                                ' "agentNickname": "counter"}'
                            },
                        }
                    ]
                }
            ),
            openai_chunk({}, finish_reason="tool_calls"),
            openai_chunk(no_choices=True, usage=(40, 25)),
        ]
    )
    answer = openai_text_reply(["There are ", "three."], usage=(30, 5))
    async with fake_model_server() as fake, server.connect() as client:
        # Parent's call, then the child's and the parent's follow-up (either order).
        fake.script(CHAT, spawn_call, answer, answer)
        await client.request(
            "workspace/config/update",
            {"provider": "openai", "endPoint": fake.openai_base_url, "apiKey": "sk-test"},
        )
        with anyio.fail_after(30):
            parent = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, parent, "split the work")
            assert terminal["method"] == "turn/completed"
            started = await wait_event(
                client, "thread/started", lambda p: p["thread"]["id"] != parent, start=mark
            )
            child = started["thread"]["id"]
            await wait_event(
                client, "turn/completed", lambda p: p["turn"]["threadId"] == child, start=mark
            )
            await fake.received(CHAT, 3)
        child_request = next(
            body
            for body in fake.bodies(CHAT)
            if body["messages"][-1] == {"role": "user", "content": "count the files"}
        )
        system = child_request["messages"][0]["content"]
        assert "do not spawn other agents" in system
        offered = {tool["function"]["name"] for tool in child_request["tools"]}
        assert not offered & {"SpawnAgent", "WaitAgent", "SendInput"}
        read = await client.request("thread/read", {"threadId": child, "includeTurns": True})
        (child_turn,) = read["thread"]["turns"]
        assert child_turn["tokenUsage"]["outputTokens"] == 5
        texts = [i["payload"]["text"] for i in child_turn["items"] if i["type"] == "agentMessage"]
        assert texts == ["There are three."]
        entries = progress_of(client, turn_id)[-1]["entries"]
        assert [entry["label"] for entry in entries] == ["counter"]


async def test_progress_can_be_opted_out_of(server: ServerUnderTest) -> None:
    opt_out = {"optOutNotificationMethods": ["subagent/progress"]}
    async with server.connect(capabilities=opt_out) as client:
        with anyio.fail_after(30):
            parent = await new_thread(client)
            turn_id, _ = await run_turn(client, parent, spawn("hello", agentNickname="quiet"))
            child = (await tool_answer(client, parent, turn_id))["childThreadId"]
            wait_id, _ = await run_turn(client, parent, call("WaitAgent", childThreadId=child))
            assert (await tool_answer(client, parent, wait_id))["status"] == "completed"
            assert [m for m in client.messages if m.get("method") == "subagent/progress"] == []
