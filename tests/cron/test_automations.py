"""The automation runner (DotCraft parity 2, §3.5): tasks run as rounds of real turns
with the offline model, on a clock the tests move; ``CompleteLocalTask`` ends a run
early, in a task's own thread and in a bound one; schedules, retries with back-off
and ``automation/task/updated``. Killed processes and two nodes are in
tests/cron/test_automation_processes.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from appserver.protocol import errors as rpc_errors
from tests.support.client import RpcClient
from tests.support.cron_clock import FakeClock, epoch_ms
from tests.support.cron_servers import T0, write_config
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import Approver, new_thread, run_turn, start_turn

MINUTE = 60_000
HOUR = 3_600_000
POLL = 30_000  # the default PollingInterval
UPDATED = "automation/task/updated"


def complete_with(summary: str) -> str:
    """A description whose prompt makes the offline model call CompleteLocalTask."""
    return "Do the work.\n?tool CompleteLocalTask " + json.dumps({"summary": summary})


@asynccontextmanager
async def automation_server(
    workspace: Path, config: dict[str, Any] | None = None
) -> AsyncIterator[tuple[ServerUnderTest, FakeClock]]:
    """A memory server (trusted workspace) whose automation runner uses a FakeClock."""
    if config is not None:
        write_config(workspace, config)
    async with running_server("memory", workspace, trust_workspace=True) as sut:
        assert sut.app is not None
        sut.app.router.install_pending()  # the family waits for its first call
        assert sut.app.families.automations is not None
        clock = FakeClock(T0)
        sut.app.families.automations.use_clock(clock)
        yield sut, clock


async def create(client: RpcClient, **params: Any) -> str:
    params.setdefault("title", "task")
    return str((await client.request("automation/task/create", params))["taskId"])


async def updated(client: RpcClient, task_id: str, status: str, start: int = 0) -> dict[str, Any]:
    """The task of the first ``automation/task/updated`` of ``task_id`` with ``status``."""
    params = await client.notification(
        UPDATED,
        start=start,
        where=lambda p: p["task"]["id"] == task_id and p["task"]["status"] == status,
    )
    task: dict[str, Any] = params["task"]
    return task


def statuses(client: RpcClient, task_id: str, start: int = 0) -> list[str]:
    return [
        m["params"]["task"]["status"]
        for m in client.since(start, UPDATED)
        if m["params"]["task"]["id"] == task_id
    ]


async def turns_of(client: RpcClient, thread_id: str) -> list[dict[str, Any]]:
    read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    turns: list[dict[str, Any]] = read["thread"]["turns"]
    return turns


async def test_a_task_runs_its_rounds_in_its_own_thread(workspace: Path) -> None:
    opt_out = {"optOutNotificationMethods": [UPDATED]}
    async with (
        automation_server(workspace) as (sut, _clock),
        sut.connect() as client,
        sut.connect("quiet", capabilities=opt_out) as quiet,
        sut.connect("unready", initialize=False) as unready,
    ):
        workflow = "---\nmax_rounds: 3\n---\nRound of {{ task.title }}: {{ task.description }}"
        task_id = await create(
            client, title="Three rounds", description="say hi", workflowTemplate=workflow
        )
        done = await updated(client, task_id, "completed")
        assert statuses(client, task_id) == ["running", "running", "completed"]
        updates = [m["params"] for m in client.notifications(UPDATED)]
        assert updates[0]["workspacePath"] == str(workspace.resolve())
        assert "threadId" not in updates[0]["task"]
        thread_id = updates[1]["task"]["threadId"]
        assert done["threadId"] == thread_id and "agentSummary" not in done

        read = await client.request("automation/task/read", {"taskId": task_id})
        assert read["agentSummary"] == "You said: Round of Three rounds: say hi"
        turns = await turns_of(client, thread_id)
        assert len(turns) == 3 and {turn["status"] for turn in turns} == {"completed"}
        user = turns[0]["items"][0]["payload"]
        assert user["text"] == "Round of Three rounds: say hi"
        assert (user["triggerKind"], user["triggerLabel"], user["triggerRefId"]) == (
            "automation",
            "Three rounds",
            task_id,
        )
        thread = (await client.request("thread/read", {"threadId": thread_id}))["thread"]
        assert (thread["originChannel"], thread["userId"]) == ("automations", f"task-{task_id}")
        assert thread["displayName"] == "Three rounds"
        config = thread["configuration"]
        assert config["approvalPolicy"] == "autoApprove" and "toolProfile" not in config
        assert config["requireApprovalOutsideWorkspace"] is False
        assert config["automationTaskDirectory"] == str(
            workspace.resolve() / ".craft/tasks" / task_id
        )

        # The same task, run again, ends early through CompleteLocalTask: one more turn.
        again = (await client.request("automation/task/run", {"taskId": task_id}))["task"]
        assert again["status"] == "pending"
        path = workspace / ".craft" / "tasks" / task_id / "task.md"
        path.write_text(path.read_text("utf-8").replace("say hi", complete_with("early")), "utf-8")
        mark = client.mark()
        await updated(client, task_id, "completed", mark)
        assert len(await turns_of(client, thread_id)) == 4  # the same thread, one turn
        read = await client.request("automation/task/read", {"taskId": task_id})
        assert read["agentSummary"] == "early"  # the tool's summary wins over the last message
        assert quiet.notifications(UPDATED) == []  # opted out
        assert unready.notifications(UPDATED) == []  # never finished the handshake


async def test_complete_local_task_in_a_bound_thread(workspace: Path) -> None:
    async with automation_server(workspace) as (sut, _clock), sut.connect() as client:
        approver = Approver(client, decision=None)
        thread_id = await new_thread(client)
        # The bound thread is busy (a turn waits for an approval): the task waits too.
        busy = await start_turn(client, thread_id, "!echo hold")
        request = await approver.wait_request()
        workflow = "---\nmax_rounds: 5\n---\n{{ task.description }}"
        task_id = await create(
            client,
            title="Bound",
            description=complete_with("bound done"),
            workflowTemplate=workflow,
            threadBinding={"threadId": thread_id},
        )
        running = await client.notification(
            UPDATED, where=lambda p: p["task"]["status"] == "running" and "threadId" in p["task"]
        )
        assert running["task"]["threadId"] == thread_id
        for method, params, message in [
            ("automation/task/run", {}, "Cannot run a task that is already running."),
            ("automation/task/delete", {}, f"Task '{task_id}' cannot be deleted while"),
            ("automation/task/updateBinding", {"threadBinding": None}, "Cannot change binding"),
        ]:
            failure = await client.fail(method, {"taskId": task_id, **params})
            assert failure.code == rpc_errors.TASK_INVALID_STATUS
            assert failure.message.startswith(message), failure.message

        await approver.answer(request, "decline")
        done = await updated(client, task_id, "completed")
        assert done["threadId"] == thread_id
        read = await client.request("automation/task/read", {"taskId": task_id})
        assert read["agentSummary"] == "bound done"
        turns = await turns_of(client, thread_id)
        assert [turn["id"] for turn in turns] == [busy, "turn_002"]  # one round, not five
        call = next(item for item in turns[1]["items"] if item["type"] == "toolCall")
        assert call["payload"]["toolName"] == "CompleteLocalTask"
        # The bound thread's own configuration is not changed, and its own turns
        # are not offered the tool.
        thread = (await client.request("thread/read", {"threadId": thread_id}))["thread"]
        assert "toolProfile" not in (thread.get("configuration") or {})
        _, terminal = await run_turn(client, thread_id, complete_with("not mine"))
        answer = terminal["params"]["turn"]["items"][-1]["payload"]["text"]
        assert "not available" in answer, answer


async def test_schedules(workspace: Path) -> None:
    async with automation_server(workspace) as (sut, clock), sut.connect() as client:
        # `at`: once at its time, then completed for good (DotCraft ran it on every poll).
        at_id = await create(
            client,
            title="Once",
            description=complete_with("once"),
            schedule={"kind": "at", "atMs": T0 + MINUTE},
        )
        await clock.wait_sleeper(T0 + POLL)
        assert statuses(client, at_id) == []
        clock.advance(MINUTE)
        done = await updated(client, at_id, "completed")
        assert "nextRunAt" not in done
        clock.advance(HOUR)
        await clock.wait_sleeper(clock.now_ms() + POLL)  # polled again since
        assert statuses(client, at_id) == ["running", "running", "completed"]
        assert len(await turns_of(client, done["threadId"])) == 1

        # `every`: at once, then each interval after the run ended, in the same thread.
        start = clock.now_ms()
        every_id = await create(
            client,
            title="Hourly",
            description=complete_with("tick"),
            schedule={"kind": "every", "everyMs": HOUR},
        )
        first = await updated(client, every_id, "pending")
        assert first["nextRunAt"] == iso(start + HOUR)
        clock.advance(HOUR)
        mark = client.mark()
        second = await updated(client, every_id, "pending", mark)
        assert second["nextRunAt"] == iso(start + 2 * HOUR)
        assert len(await turns_of(client, second["threadId"])) == 2

        # `daily` waits for its slot; a kind nothing runs is refused.
        daily = await client.request(
            "automation/task/create",
            {"title": "Daily", "schedule": {"kind": "daily", "dailyHour": 12, "dailyMinute": 30}},
        )
        assert daily["task"]["nextRunAt"] == "2100-01-04T12:30:00.000Z"
        assert daily["task"]["schedule"]["tz"] == "UTC"
        # Two tasks with one title in one second have one id (DotCraft's rule).
        failure = await client.fail("automation/task/create", {"title": "Daily"})
        assert (failure.code, failure.message) == (
            rpc_errors.TASK_ALREADY_EXISTS,
            f"Task already exists: {daily['taskId']}",
        )


async def test_a_run_that_breaks_is_retried_with_back_off(workspace: Path) -> None:
    config = {"Automations": {"MaxRetries": 1, "RetryInitialDelay": "00:01:00"}}
    async with automation_server(workspace, config) as (sut, clock), sut.connect() as client:
        task_id = await create(client, title="Broken", schedule={"kind": "at", "atMs": T0 + MINUTE})
        (workspace / ".craft" / "tasks" / task_id / "workflow.md").unlink()
        clock.advance(MINUTE)
        await updated(client, task_id, "pending")
        failed_at = clock.now_ms()
        await clock.wait_sleeper(failed_at + POLL)
        clock.advance(POLL)
        await clock.wait_sleeper(failed_at + MINUTE)  # polled: it waits out the back-off
        # Each attempt: running, running with its thread, then the outcome.
        assert statuses(client, task_id) == ["running", "running", "pending"]
        clock.advance(POLL)
        await updated(client, task_id, "failed")  # past MaxRetries
        assert statuses(client, task_id)[3:] == ["running", "running", "failed"]
        # Run by hand, it is tried again at once (the retries start over).
        (workspace / ".craft" / "tasks" / task_id / "workflow.md").write_text(
            complete_with("fixed")
        )
        mark = client.mark()
        await client.request("automation/task/run", {"taskId": task_id})
        await updated(client, task_id, "completed", mark)


def iso(ms: int) -> str:
    """Epoch milliseconds as the wire's ISO 8601."""
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


assert iso(epoch_ms("2100-01-04T12:30:00")) == "2100-01-04T12:30:00.000Z"


async def test_a_checked_in_task_waits_for_trust_and_links_are_not_followed(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "task.md").write_text("---\nid: outside\n---\nNot the workspace's.\n")
    tasks = workspace / ".craft" / "tasks"
    (tasks / "checked-in").mkdir(parents=True)
    (tasks / "checked-in" / "task.md").write_text(
        "---\nid: checked-in\ntitle: From the checkout\n---\n" + complete_with("ran")
    )
    (tasks / "checked-in" / "workflow.md").write_text("{{ task.description }}")
    (tasks / "linked").symlink_to(outside)
    (tasks / "linked-file").mkdir()
    (tasks / "linked-file" / "task.md").symlink_to(outside / "task.md")
    # Files the server did not make: the workspace is not trusted.
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        assert sut.app is not None and sut.app.families.automations is not None
        assert sut.app.families.automations.may_run() is False
        listed = (await client.request("automation/task/list", {}))["tasks"]
        assert [task["id"] for task in listed] == ["checked-in"]
        failure = await client.fail("automation/task/read", {"taskId": "outside"})
        assert failure.code == rpc_errors.TASK_NOT_FOUND
        ran = (await client.request("automation/task/run", {"taskId": "checked-in"}))["task"]
        assert ran["status"] == "pending"
        assert (await client.request("automation/task/read", {"taskId": "checked-in"}))[
            "status"
        ] == "pending"
        mark = client.mark()
        await client.request("workspace/trust", {"trusted": True})
        await updated(client, "checked-in", "completed", mark)
    assert (outside / "task.md").read_text() == "---\nid: outside\n---\nNot the workspace's.\n"


async def test_a_stopping_server_gives_its_runs_back(workspace: Path) -> None:
    async with automation_server(workspace) as (sut, _clock), sut.connect() as client:
        task_id = await create(
            client,
            title="Slow",
            description="?stream 1000\n?delay 20",
            workflowTemplate="---\nmax_rounds: 1\n---\n{{ task.description }}",
        )
        running = await client.notification(UPDATED, where=lambda p: "threadId" in p["task"])
        await client.request("thread/subscribe", {"threadId": running["task"]["threadId"]})
        await client.notification("item/agentMessage/delta")
    # The stop cancelled the turn; the run was recorded as a failed attempt, not left running.
    text = (workspace / ".craft" / "tasks" / task_id / "task.md").read_text("utf-8")
    assert "status: pending" in text
