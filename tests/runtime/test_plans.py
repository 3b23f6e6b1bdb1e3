"""Plans: the CreatePlan / UpdateTodos tools, ``plan/updated``, the stored plan.

The offline model writes them: ``?plan TITLE`` calls CreatePlan with three
todos, ``?todo ID STATUS [CONTENT]`` calls UpdateTodos.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol.plans import Plan
from appserver.providers.offline import offline_plan, parse_script
from appserver.tools.base import ToolContext, ToolError
from appserver.tools.plans import CreatePlanTool, UpdateTodosTool, attach_plan_store
from appserver.tools.registry import ToolRegistry
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import new_thread, one_item, run_turn, wait_count, wait_terminal

SHIP_TODOS = [
    {"id": "1", "content": "Read the code", "priority": "high", "status": "pending"},
    {"id": "2", "content": "Make the change", "priority": "medium", "status": "pending"},
    {"id": "3", "content": "Run the tests", "priority": "low", "status": "pending"},
]


def _plan_updates(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "plan/updated" and "id" not in m]


async def _read_plan(client: Any, thread_id: str) -> dict[str, Any] | None:
    result = await client.request("thread/read", {"threadId": thread_id})
    plan = result.get("plan")
    return dict(plan) if plan is not None else None


async def test_plan_is_created_updated_and_read_back(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread_id = await new_thread(client)
        assert await _read_plan(client, thread_id) is None

        mark = client.mark()
        turn_id, end = await run_turn(client, thread_id, "?plan Ship it")
        assert end["method"] == "turn/completed"
        [update] = _plan_updates(client.since(mark))
        assert next(k for k in update if k != "seq") == "threadId"  # our rule: the thread first
        assert update["threadId"] == thread_id
        assert update["title"] == "Ship it"
        assert update["overview"] == "Offline plan: Ship it"
        assert update["content"] == ""
        assert update["todos"] == SHIP_TODOS
        assert isinstance(update["seq"], int)  # numbered by the thread's journal
        # Sent before the turn ends, as the tool call's result is.
        sent = [
            "toolResult"
            if m.get("method") == "item/completed" and m["params"]["item"]["type"] == "toolResult"
            else m.get("method")
            for m in client.since(mark)
        ]
        assert sent.index("plan/updated") < sent.index("toolResult") < sent.index("turn/completed")
        call = one_item(client, turn_id, "toolCall", mark)["payload"]
        assert call["toolName"] == "CreatePlan"
        result = one_item(client, turn_id, "toolResult", mark)["payload"]
        assert result["success"] is True and "Plan: Ship it (0/3 completed)" in result["result"]

        plan = await _read_plan(client, thread_id)
        assert plan == {k: v for k, v in update.items() if k not in ("threadId", "seq")}

        mark = client.mark()
        await run_turn(client, thread_id, "?todo 2 in_progress")
        [update] = _plan_updates(client.since(mark))
        assert [t["status"] for t in update["todos"]] == ["pending", "in_progress", "pending"]
        mark = client.mark()
        await run_turn(client, thread_id, "?todo 4 pending Write the docs")
        [update] = _plan_updates(client.since(mark))
        assert update["todos"][-1] == {
            "id": "4",
            "content": "Write the docs",
            "priority": "medium",
            "status": "pending",
        }
        plan = await _read_plan(client, thread_id)
        assert plan is not None and [t["id"] for t in plan["todos"]] == ["1", "2", "3", "4"]
        assert plan["todos"][1]["status"] == "in_progress"

        resumed = await client.request("thread/resume", {"threadId": thread_id})
        assert resumed["plan"] == plan


async def test_bad_updates_are_the_models_problem(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread_id = await new_thread(client)
        mark = client.mark()
        turn_id, end = await run_turn(client, thread_id, "?todo 1 completed")
        assert end["method"] == "turn/completed"
        result = one_item(client, turn_id, "toolResult", mark)["payload"]
        assert result["success"] is False and "no plan yet" in result["result"]
        await run_turn(client, thread_id, "?plan P")
        mark = client.mark()
        turn_id, _ = await run_turn(client, thread_id, "?todo 1 finished")
        result = one_item(client, turn_id, "toolResult", mark)["payload"]
        assert result["success"] is False and "status must be one of" in result["result"]
        assert _plan_updates(client.since(mark)) == []
        plan = await _read_plan(client, thread_id)
        assert plan is not None and plan["todos"][0]["status"] == "pending"


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_broadcast_to_all_and_opt_out(kind: str, workspace: Path) -> None:
    async with running_server(kind, workspace) as server:
        quiet = {"optOutNotificationMethods": ["plan/updated"]}
        async with (
            server.connect("starter") as starter,
            server.connect("quiet", capabilities=quiet) as muted,
            server.connect("bystander") as bystander,
        ):
            thread_id = await new_thread(starter)
            await muted.request("thread/subscribe", {"threadId": thread_id})
            muted_mark = muted.mark()
            turn_id, _ = await run_turn(starter, thread_id, "?plan Broadcast")
            # Not subscribed, did not start the turn: gets DotCraft's broadcast.
            update = await bystander.notification("plan/updated")
            assert update["threadId"] == thread_id and update["title"] == "Broadcast"
            # Subscribed, but opted out: the turn's end arrives, the plan does not
            # (a connection receives a thread's notifications in seq order).
            await wait_terminal(muted, turn_id, start=muted_mark)
            assert _plan_updates(muted.messages) == []
            assert [u["title"] for u in _plan_updates(starter.messages)] == ["Broadcast"]


async def test_plan_survives_restart_and_replays(workspace: Path) -> None:
    async with running_server("memory", workspace) as first, first.connect() as client:
        thread_id = await new_thread(client)
        await run_turn(client, thread_id, "?plan Keep me")
        await run_turn(client, thread_id, "?todo 1 completed")
        [created, updated] = _plan_updates(client.messages)
    async with running_server("memory", workspace) as second, second.connect() as client:
        plan = await _read_plan(client, thread_id)
        assert plan is not None and plan["title"] == "Keep me"
        assert [t["status"] for t in plan["todos"]] == ["completed", "pending", "pending"]
        # The notifications are in the thread's journal: afterSeq replays them.
        await client.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
        replayed = await wait_count(client, lambda m: m.get("method") == "plan/updated", 2)
        assert [m["params"] for m in replayed] == [created, updated]


async def test_plan_goes_with_its_thread(workspace: Path) -> None:
    async with running_server("memory", workspace) as server, server.connect() as client:
        thread_id = await new_thread(client)
        await run_turn(client, thread_id, "?plan Doomed")
        assert server.app is not None
        plans = server.app.runtime.threads.plans
        assert await plans.load(thread_id) is not None
        await client.request("thread/delete", {"threadId": thread_id})
        assert await plans.load(thread_id) is None
        rows = await server.app.runtime.db.fetch("SELECT count(*) FROM thread_plans")
        assert rows[0][0] == 0


# --- the tools and the offline directives, without a server ---------------------------


class _Store:
    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}

    async def load(self, thread_id: str) -> Plan | None:
        return self.plans.get(thread_id)

    async def save(self, thread_id: str, plan: Plan) -> None:
        self.plans[thread_id] = plan


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, thread_id="t1", turn_id="u1", call_id="c1")


async def test_tools_check_arguments_and_need_no_approval(tmp_path: Path) -> None:
    create, update = CreatePlanTool(), UpdateTodosTool()
    ctx = _ctx(tmp_path)
    plan = create.plan({"title": "T", "overview": "O", "todos": [{"content": "a"}]}, ctx)
    assert plan.approval is None
    with pytest.raises(ToolError, match="not available"):
        await create.run(plan, ctx)  # the runner makes it an error result
    store = _Store()
    attach_plan_store([create, update], store)
    assert (await create.run(plan, ctx)).success
    assert store.plans["t1"].todos[0].id == "1"
    for bad in (
        {"title": "T", "overview": "O"},
        {"title": "", "overview": "O", "todos": []},
        {"title": "T", "overview": "O", "todos": [{"content": "a", "priority": "urgent"}]},
        {"title": "T", "overview": "O", "todos": [{"id": "x", "content": "a"}] * 2},
        {"title": "T", "overview": "O", "todos": [{"content": "a", "colour": "red"}]},
    ):
        with pytest.raises(ToolError):
            create.plan(bad, ctx)
    with pytest.raises(ToolError):
        update.plan({"todos": []}, ctx)
    with pytest.raises(ToolError):
        update.plan({"todos": [{"status": "completed"}]}, ctx)
    missing = update.plan({"todos": [{"id": "9", "status": "completed"}]}, ctx)
    outcome = await update.run(missing, ctx)
    assert not outcome.success and "needs content" in outcome.output


def test_registry_offers_the_plan_tools() -> None:
    registry = ToolRegistry.with_defaults()
    assert registry.names()[-2:] == ["CreatePlan", "UpdateTodos"]
    spec = {s.name: s for s in registry.specs()}["CreatePlan"]
    assert spec.input_schema["required"] == ["title", "overview", "todos"]


def test_offline_directives() -> None:
    assert parse_script("?plan Ship it").tool == (
        "CreatePlan",
        json.dumps(offline_plan("Ship it")),
    )
    name, raw = parse_script("?todo 2 completed").tool or ("", "")
    assert name == "UpdateTodos" and '"status": "completed"' in raw
    assert parse_script("?todo 2").tool is None  # malformed: plain text
    assert parse_script("?todo 2").plain_lines == ["?todo 2"]
