"""The cron family end to end (reference §3.5, §4): cron/add|list|remove|enable|run,
`cron/stateChanged`, `system/jobResult`, runs as real turns with the offline model,
the scheduler on an injected clock, restart persistence and the agent's cron tool."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from appserver.protocol import errors as rpc_errors
from tests.support.client import RpcClient
from tests.support.cron_clock import FakeClock, epoch_ms
from tests.support.cron_servers import (
    T0,
    add_job,
    clocked_server,
    job_result,
    list_jobs,
    write_config,
)
from tests.support.helpers import identity
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import Approver, new_thread, read_turn, run_turn, start_turn

JOB_ID = re.compile(r"^[0-9a-f]{8}$")
MINUTE = 60_000
HOUR = 3_600_000


def state_changes(client: RpcClient, start: int = 0) -> list[dict[str, Any]]:
    return [m["params"] for m in client.since(start, "cron/stateChanged")]


async def cron_threads(client: RpcClient) -> list[dict[str, Any]]:
    result = await client.request(
        "thread/list", {"identity": identity(channelName="cron", userId="cron")}
    )
    threads: list[dict[str, Any]] = result["data"]
    return threads


# --- handshake ---------------------------------------------------------------------------


async def test_capabilities_are_advertised(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        result = await client.initialize()
        assert result["capabilities"]["cronManagement"] is True
        assert result["capabilities"]["heartbeatManagement"] is True


async def test_cron_can_be_switched_off_in_the_workspace_config(workspace: Path) -> None:
    write_config(workspace, {"Cron": {"Enabled": False}})
    async with running_server("memory", workspace) as sut:
        assert sut.app is not None
        assert sut.app.cron is None
        assert "cron" not in sut.app.engine.tools
        async with sut.connect(initialize=False) as client:
            capabilities = (await client.initialize())["capabilities"]
            assert "cronManagement" not in capabilities
            assert capabilities["heartbeatManagement"] is True
            for method in ("cron/add", "cron/list", "cron/remove", "cron/enable", "cron/run"):
                failure = await client.fail(method, {"jobId": "00000000"})
                assert failure.code == rpc_errors.METHOD_NOT_FOUND
                assert failure.message == f"Method not found: {method}"


# --- cron/add ----------------------------------------------------------------------------


async def test_add_returns_the_job_and_lists_it(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        mark = client.mark()
        job = await add_job(client, name="  Status  ", schedule={"kind": "every", "everyMs": HOUR})
        assert JOB_ID.match(job["id"]), job["id"]
        assert job["name"] == "Status"
        assert job["schedule"] == {"kind": "every", "everyMs": HOUR}
        assert job["enabled"] is True
        assert job["deleteAfterRun"] is False
        assert job["state"] == {"nextRunAtMs": job["createdAtMs"] + HOUR}
        assert "threadId" not in job
        changed = await client.notification("cron/stateChanged", start=mark)
        assert changed == {"job": job, "removed": False}
        # The response precedes the notification it caused.
        kinds = ["method" in m for m in client.messages[mark:]]
        assert kinds[:2] == [False, True]
        assert await list_jobs(client, include_disabled=False) == [job]


async def test_list_leaves_out_disabled_jobs_unless_asked(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        first = await add_job(client, name="first")
        off = await add_job(client, name="off", enabled=False)
        third = await add_job(client, name="third")
        assert off["enabled"] is False and off["state"]["nextRunAtMs"] > 0
        assert await client.request("cron/list") == {"jobs": [first, third]}
        assert await list_jobs(client) == [first, off, third]


async def test_first_runs_of_each_schedule_kind(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        cases: list[tuple[dict[str, Any], dict[str, Any], int]] = [
            (
                {"kind": "every", "everyMs": MINUTE},
                {"kind": "every", "everyMs": MINUTE},
                T0 + MINUTE,
            ),
            (
                {"kind": "every", "everyMs": MINUTE, "initialDelayMs": 1000},
                {"kind": "every", "everyMs": MINUTE, "initialDelayMs": 1000},
                T0 + 1000,
            ),
            ({"kind": "at", "atMs": T0 + 5000}, {"kind": "at", "atMs": T0 + 5000}, T0 + 5000),
            (
                {"kind": "daily", "dailyHour": 11, "dailyMinute": 15},
                {"kind": "daily", "dailyHour": 11, "dailyMinute": 15, "tz": "UTC"},
                epoch_ms("2100-01-04T11:15:00"),
            ),
            (
                # 09:30 in Berlin (UTC+1 in January) has passed at 10:00 UTC: tomorrow.
                {"kind": "daily", "dailyHour": 9, "dailyMinute": 30, "tz": "Europe/Berlin"},
                {"kind": "daily", "dailyHour": 9, "dailyMinute": 30, "tz": "Europe/Berlin"},
                epoch_ms("2100-01-05T08:30:00"),
            ),
            (
                {"kind": "daily", "dailyHour": 7},
                {"kind": "daily", "dailyHour": 7, "dailyMinute": 0, "tz": "UTC"},
                epoch_ms("2100-01-05T07:00:00"),
            ),
            (
                # Weekdays 08:30 in New York (UTC-5): later this Monday.
                {"kind": "cron", "expr": " 30  8 * * 1-5 ", "tz": "America/New_York"},
                {"kind": "cron", "expr": "30 8 * * 1-5", "tz": "America/New_York"},
                epoch_ms("2100-01-04T13:30:00"),
            ),
            (
                {"kind": "cron", "expr": "0 */6 * * *"},
                {"kind": "cron", "expr": "0 */6 * * *", "tz": "UTC"},
                epoch_ms("2100-01-04T12:00:00"),
            ),
        ]
        for given, stored, first in cases:
            job = await add_job(client, schedule=given)
            assert job["schedule"] == stored, given
            assert job["createdAtMs"] == T0
            assert job["state"] == {"nextRunAtMs": first}, given


async def test_add_validation_errors(server: ServerUnderTest) -> None:
    every = {"kind": "every", "everyMs": MINUTE}
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"schedule": {"kind": "every", "everyMs": 999}},
            "'schedule.everyMs': must be at least 1000",
        ),
        (
            {"schedule": {"kind": "every"}},
            "'schedule.everyMs': is required for schedule kind 'every'",
        ),
        ({"schedule": {**every, "initialDelayMs": -1}}, "'schedule.initialDelayMs': must not be"),
        (
            {"schedule": {**every, "tz": "UTC"}},
            "'schedule.tz': is not used by schedule kind 'every'",
        ),
        ({"schedule": {**every, "atMs": 5}}, "'schedule.atMs': is not used"),
        ({"schedule": {"kind": "at", "atMs": 1000}}, "'schedule.atMs': is in the past"),
        ({"schedule": {"kind": "at"}}, "'schedule.atMs': is required"),
        ({"schedule": {"kind": "daily"}}, "'schedule.dailyHour': is required"),
        ({"schedule": {"kind": "daily", "dailyMinute": 5}}, "'schedule.dailyHour': is required"),
        ({"schedule": {"kind": "daily", "dailyHour": 24}}, "'schedule.dailyHour': must be between"),
        (
            {"schedule": {"kind": "daily", "dailyHour": 9, "dailyMinute": 60}},
            "'schedule.dailyMinute': must be between",
        ),
        (
            {"schedule": {"kind": "daily", "dailyHour": 9, "tz": "Mars/Olympus_Mons"}},
            "'schedule.tz': unknown time zone 'Mars/Olympus_Mons'",
        ),
        ({"schedule": {"kind": "daily", "dailyHour": 9, "tz": " "}}, "'schedule.tz': must not"),
        ({"schedule": {"kind": "cron"}}, "'schedule.expr': is required"),
        ({"schedule": {"kind": "cron", "expr": "* * * *"}}, "'schedule.expr': must have 5 fields"),
        ({"schedule": {"kind": "cron", "expr": "0 0 * * * *"}}, "must have 5 fields"),
        ({"schedule": {"kind": "cron", "expr": "61 * * * *"}}, "is not a valid cron expression"),
        ({"schedule": {"kind": "cron", "expr": "0 0 31 2 *"}}, "never matches a date"),
        ({"schedule": {"kind": "cron", "expr": "* * * * *", "tz": "Nowhere"}}, "unknown time zone"),
        ({"schedule": {"kind": "weekly"}}, "'schedule.kind'"),
        ({"schedule": None}, "'schedule'"),
        ({"name": " "}, "'name': must not be empty"),
        ({"message": ""}, "'message': must not be empty"),
        ({"approvalPolicy": "sometimes"}, "'approvalPolicy'"),
    ]
    async with server.connect() as client:
        for change, detail in cases:
            params = {"name": "job", "message": "hello", "schedule": every, **change}
            if change.get("schedule", every) is None:
                del params["schedule"]
            failure = await client.fail("cron/add", params)
            assert failure.code == rpc_errors.INVALID_PARAMS, change
            assert failure.message == "Invalid params"
            assert detail in failure.data["detail"], (change, failure.data)
        assert await list_jobs(client) == []
        assert client.notifications("cron/stateChanged") == []


async def test_add_checks_the_given_thread(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        failure = await client.fail(
            "cron/add",
            {
                "name": "j",
                "message": "m",
                "schedule": {"kind": "every", "everyMs": MINUTE},
                "threadId": "thread_19700101_zzzzzz",
            },
        )
        assert failure.code == rpc_errors.THREAD_NOT_FOUND
        assert failure.message == "Thread not found: thread_19700101_zzzzzz"
        thread_id = await new_thread(client)
        failure = await client.fail(
            "cron/add",
            {
                "name": "j",
                "message": "m",
                "schedule": {"kind": "every", "everyMs": MINUTE},
                "threadId": thread_id,
                "approvalPolicy": "autoApprove",
            },
        )
        assert failure.code == rpc_errors.INVALID_PARAMS
        assert "thread/config/update" in failure.data["detail"]
        client_history = (
            await client.request("thread/start", {"identity": identity(), "historyMode": "client"})
        )["thread"]["id"]
        failure = await client.fail(
            "cron/add",
            {
                "name": "j",
                "message": "m",
                "schedule": {"kind": "every", "everyMs": MINUTE},
                "threadId": client_history,
            },
        )
        assert failure.code == rpc_errors.INVALID_PARAMS
        assert "client-managed history" in failure.data["detail"]
        job = await add_job(client, threadId=thread_id)
        assert job["threadId"] == thread_id


# --- cron/remove, cron/enable ----------------------------------------------------------


async def test_remove_and_unknown_jobs(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client, multi_server.connect("watcher") as watcher:
        job = await add_job(client)
        await watcher.notification("cron/stateChanged")
        mark = watcher.mark()
        assert await client.request("cron/remove", {"jobId": job["id"]}) == {"removed": True}
        removed = await watcher.notification("cron/stateChanged", start=mark)
        assert removed == {"job": job, "removed": True}
        assert await list_jobs(client) == []
        for method, params in (
            ("cron/remove", {"jobId": job["id"]}),
            ("cron/enable", {"jobId": job["id"], "enabled": True}),
            ("cron/run", {"jobId": job["id"]}),
        ):
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.CRON_JOB_NOT_FOUND
            assert failure.message == f"Cron job not found: {job['id']}"
        for method in ("cron/remove", "cron/run"):
            failure = await client.fail(method, {})
            assert failure.code == rpc_errors.INVALID_PARAMS
            assert failure.data == {"detail": "'jobId' is required."}
        failure = await client.fail("cron/enable", {"jobId": job["id"]})
        assert failure.data == {"detail": "'enabled' is required."}


async def test_enable_keeps_or_recomputes_the_next_run(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, clock), sut.connect() as client:
        job = await add_job(client, schedule={"kind": "every", "everyMs": MINUTE})
        assert job["state"]["nextRunAtMs"] == T0 + MINUTE
        await client.notification("cron/stateChanged")
        mark = client.mark()
        off = (await client.request("cron/enable", {"jobId": job["id"], "enabled": False}))["job"]
        assert off["enabled"] is False
        assert off["state"]["nextRunAtMs"] == T0 + MINUTE  # disabling keeps it
        # Enabling with a next run still ahead keeps it too.
        on = (await client.request("cron/enable", {"jobId": job["id"], "enabled": True}))["job"]
        assert on["enabled"] is True and on["state"]["nextRunAtMs"] == T0 + MINUTE
        await client.request("cron/enable", {"jobId": job["id"], "enabled": False})
        # While disabled, time passes its next run: nothing runs ...
        clock.advance(5 * MINUTE)
        # ... and enabling computes a fresh one from now instead of running at once.
        on = (await client.request("cron/enable", {"jobId": job["id"], "enabled": True}))["job"]
        assert on["state"]["nextRunAtMs"] == T0 + 6 * MINUTE
        await client.settle()
        changes = state_changes(client, mark)
        assert [c["job"]["enabled"] for c in changes] == [False, True, False, True]
        assert all(c["removed"] is False for c in changes)
        assert changes[-1]["job"] == on
        await clock.wait_sleeper(T0 + 6 * MINUTE)
        assert client.notifications("system/jobResult") == []


# --- runs --------------------------------------------------------------------------------


async def test_run_queues_a_turn_in_a_dedicated_thread(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        job = await add_job(client, name="Greeter", message="hello", enabled=False)
        mark = client.mark()
        queued = await client.request("cron/run", {"jobId": job["id"]})
        assert queued == {"queued": True, "job": job}
        result = await job_result(client, mark)
        thread_id = result["threadId"]
        assert result == {
            "source": "cron",
            "jobId": job["id"],
            "jobName": "Greeter",
            "threadId": thread_id,
            "result": "You said: hello",
            "tokenUsage": result["tokenUsage"],
        }
        assert result["tokenUsage"]["inputTokens"] > 0 and result["tokenUsage"]["outputTokens"] > 0
        # The dedicated thread was announced and carries the cron identity.
        started = await client.notification("thread/started", start=mark)
        thread = started["thread"]
        assert thread["id"] == thread_id
        assert (thread["originChannel"], thread["userId"]) == ("cron", "cron")
        assert thread["displayName"] == "Cron: Greeter"
        assert [t["id"] for t in await cron_threads(client)] == [thread_id]
        # stateChanged (after the run) precedes jobResult.
        after = state_changes(client, mark)[-1]
        assert after["removed"] is False
        assert after["job"]["state"] == {
            "nextRunAtMs": T0 + HOUR,  # a disabled job keeps its next run
            "lastRunAtMs": T0,
            "lastStatus": "ok",
            "lastThreadId": thread_id,
            "lastResult": "You said: hello",
        }
        order = [m.get("method") for m in client.messages[mark:] if m.get("method")]
        assert order.index("cron/stateChanged") < order.index("system/jobResult")
        assert (await list_jobs(client)) == [after["job"]]
        turn = await read_turn(client, thread_id, "turn_001")
        assert turn["status"] == "completed"
        user = turn["items"][0]["payload"]
        assert user["text"] == "hello"
        assert user["nativeInputParts"] == [{"type": "text", "text": "hello"}]
        assert (user["triggerKind"], user["triggerLabel"], user["triggerRefId"]) == (
            "cron",
            "Greeter",
            job["id"],
        )
        # The next run reuses the thread.
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        assert (await job_result(client, mark))["threadId"] == thread_id
        assert len(await cron_threads(client)) == 1
        await read_turn(client, thread_id, "turn_002")


async def test_run_works_over_every_transport(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        job = await add_job(client, message="ping")
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        result = await job_result(client, mark)
        assert result["result"] == "You said: ping"
        [job] = await list_jobs(client)
        assert job["state"]["lastStatus"] == "ok"


async def test_due_jobs_run_when_the_clock_reaches_them(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, clock), sut.connect() as client:
        job = await add_job(client, message="tick", schedule={"kind": "every", "everyMs": MINUTE})
        await clock.wait_sleeper(T0 + MINUTE)
        assert client.notifications("system/jobResult") == []
        mark = client.mark()
        clock.advance(MINUTE)
        result = await job_result(client, mark)
        assert result["result"] == "You said: tick"
        # The next run is one interval after this one.
        await clock.wait_sleeper(T0 + 2 * MINUTE)
        [stored] = await list_jobs(client)
        assert stored["state"]["nextRunAtMs"] == T0 + 2 * MINUTE
        assert stored["state"]["lastRunAtMs"] == T0 + MINUTE
        mark = client.mark()
        clock.advance(MINUTE)
        await job_result(client, mark)
        assert len(client.notifications("system/jobResult")) == 2
        assert job["id"] == stored["id"]


async def test_one_shot_jobs_are_removed_after_running(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, clock), sut.connect() as client:
        at = await add_job(client, name="once", schedule={"kind": "at", "atMs": T0 + 5000})
        every = await add_job(
            client,
            name="once-every",
            deleteAfterRun=True,
            schedule={"kind": "every", "everyMs": 10_000},
        )
        assert every["deleteAfterRun"] is True
        mark = client.mark()
        clock.advance(5000)
        assert (await job_result(client, mark, at["id"]))["result"] == "You said: hello"
        clock.advance(5000)
        await job_result(client, mark, every["id"])
        removed = [c for c in state_changes(client, mark) if c["removed"]]
        assert [c["job"]["id"] for c in removed] == [at["id"], every["id"]]
        assert removed[0]["job"]["state"]["lastStatus"] == "ok"
        assert await list_jobs(client) == []


async def test_a_failed_run_records_the_error(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        job = await add_job(client, message="?fail other the model is down")
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        result = await job_result(client, mark)
        assert "result" not in result
        assert "the model is down" in result["error"]
        [stored] = await list_jobs(client)
        state = stored["state"]
        assert state["lastStatus"] == "error"
        assert "the model is down" in state["lastError"]
        assert "lastResult" not in state
        assert state["nextRunAtMs"] == T0 + HOUR
        turn = await read_turn(client, state["lastThreadId"], "turn_001")
        assert turn["status"] == "failed"


async def test_a_run_waits_for_a_busy_thread(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        approver = Approver(client, decision=None)
        thread_id = await new_thread(client)
        busy_turn = await start_turn(client, thread_id, "!echo busy")
        request = await approver.wait_request()
        job = await add_job(client, message="after you", threadId=thread_id)
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        assert sut.app is not None and sut.app.cron is not None
        with anyio.fail_after(5):
            while sut.app.cron.running_job != job["id"]:
                await anyio.lowlevel.checkpoint()  # no timing: yield until the run started
        await client.settle()
        assert client.since(mark, "system/jobResult") == []  # waiting, not skipped
        await approver.answer(request, "accept")
        result = await job_result(client, mark)
        assert result["threadId"] == thread_id
        assert result["result"] == "You said: after you"
        assert (await read_turn(client, thread_id, busy_turn))["status"] == "completed"
        cron_turn = await read_turn(client, thread_id, "turn_002")
        assert cron_turn["items"][0]["payload"]["triggerKind"] == "cron"


async def test_runs_are_serialised(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        first = await add_job(client, name="first", message="?stream 5")
        second = await add_job(client, name="second", message="two")
        mark = client.mark()
        await client.request("cron/run", {"jobId": first["id"]})
        await client.request("cron/run", {"jobId": second["id"]})
        await job_result(client, mark, second["id"])
        events = [
            (m["method"], m["params"].get("jobId") or m["params"].get("thread", {}).get("id"))
            for m in client.messages[mark:]
            if m.get("method") in ("system/jobResult", "thread/started")
        ]
        first_thread = events[0][1]
        # The second job's thread is made only after the first run ended.
        assert [e[0] for e in events] == [
            "thread/started",
            "system/jobResult",
            "thread/started",
            "system/jobResult",
        ]
        assert events[1][1] == first["id"] and events[3][1] == second["id"]
        assert events[2][1] != first_thread


async def test_a_job_whose_thread_is_gone_fails_its_run(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        thread_id = await new_thread(client)
        job = await add_job(client, threadId=thread_id)
        await client.request("thread/delete", {"threadId": thread_id})
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        result = await job_result(client, mark)
        assert result["error"] == f"Thread not found: {thread_id}"
        [stored] = await list_jobs(client)
        assert stored["state"]["lastStatus"] == "error"
        # A dedicated thread that was deleted is simply made again.
        own = await add_job(client, name="own")
        mark = client.mark()
        await client.request("cron/run", {"jobId": own["id"]})
        first = (await job_result(client, mark, own["id"]))["threadId"]
        await client.request("thread/delete", {"threadId": first})
        mark = client.mark()
        await client.request("cron/run", {"jobId": own["id"]})
        again = await job_result(client, mark, own["id"])
        assert again["result"] == "You said: hello"
        assert again["threadId"] != first


async def test_approval_policy_configures_the_dedicated_thread(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        job = await add_job(client, message="!echo from-cron", approvalPolicy="autoApprove")
        declined = await add_job(client, name="declined", message="!echo nope")
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        result = await job_result(client, mark, job["id"])
        assert result["result"] == "The command exited with code 0."
        thread = (await client.request("thread/read", {"threadId": result["threadId"]}))["thread"]
        assert thread["configuration"]["approvalPolicy"] == "autoApprove"
        # Without a policy and with nobody subscribed, approvals are declined.
        await client.request("cron/run", {"jobId": declined["id"]})
        result = await job_result(client, mark, declined["id"])
        assert result["result"] == "The shell call was declined."


# --- notifications -------------------------------------------------------------------------


async def test_opted_out_clients_get_no_cron_notifications(multi_server: ServerUnderTest) -> None:
    quiet_caps = {"optOutNotificationMethods": ["cron/stateChanged", "system/jobResult"]}
    async with (
        multi_server.connect() as client,
        multi_server.connect("quiet", capabilities=quiet_caps) as quiet,
    ):
        job = await add_job(client)
        mark = client.mark()
        await client.request("cron/run", {"jobId": job["id"]})
        await job_result(client, mark)
        await quiet.settle()
        assert quiet.notifications("cron/stateChanged") == []
        assert quiet.notifications("system/jobResult") == []


# --- restart -------------------------------------------------------------------------------


async def test_jobs_survive_a_restart_and_an_overdue_job_runs_once(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        tick = await add_job(
            client, name="tick", message="tick", schedule={"kind": "every", "everyMs": MINUTE}
        )
        await add_job(client, name="off", enabled=False, schedule={"kind": "daily", "dailyHour": 9})
        mark = client.mark()
        await client.request("cron/run", {"jobId": tick["id"]})
        thread_id = (await job_result(client, mark))["threadId"]
        before = await list_jobs(client)
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        # Still on the system clock (long before 2100): the jobs are loaded, nothing runs.
        assert await list_jobs(client) == before
        assert sut.app is not None and sut.app.cron is not None
        # Ten intervals later on the fake clock: one run, not ten.
        now = T0 + 10 * MINUTE + 1000
        clock = FakeClock(now)
        mark = client.mark()
        sut.app.cron.use_clock(clock)
        result = await job_result(client, mark)
        assert result["jobId"] == tick["id"]
        assert result["threadId"] == thread_id  # the dedicated thread is kept
        await clock.wait_sleeper(now + MINUTE)
        assert len(client.since(mark, "system/jobResult")) == 1
        jobs = {job["name"]: job for job in await list_jobs(client)}
        assert jobs["tick"]["state"]["lastRunAtMs"] == now
        assert jobs["tick"]["state"]["nextRunAtMs"] == now + MINUTE
        assert jobs["off"] == next(job for job in before if job["name"] == "off")
        await read_turn(client, thread_id, "turn_002")


async def test_a_run_cut_by_a_stop_is_recorded_and_keeps_its_thread(workspace: Path) -> None:
    """A stop cancels the run's turn; the run is still recorded (an ``at`` job
    goes, as after any run) and a dedicated thread made for it is kept."""
    slow = "?stream 1000\n?delay 20"
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        once = await add_job(
            client, name="once", message=slow, schedule={"kind": "at", "atMs": T0 + 3_600_000}
        )
        await client.request("cron/run", {"jobId": once["id"]})
        started = await client.notification("thread/started")
        await client.request("thread/subscribe", {"threadId": started["thread"]["id"]})
        await client.notification("item/agentMessage/delta")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        assert [job["name"] for job in await list_jobs(client)] == []  # ran once: gone
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        every = await add_job(client, name="every", message=slow)
        await client.request("cron/run", {"jobId": every["id"]})
        started = await client.notification("thread/started")
        thread_id = started["thread"]["id"]
        await client.request("thread/subscribe", {"threadId": thread_id})
        await client.notification("item/agentMessage/delta")
        # Kept as soon as it was made: a run killed now leaves no thread behind
        # for the next run to make another beside.
        with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:
            query = "SELECT thread_id FROM cron_jobs WHERE id = ?"
            assert db.execute(query, (every["id"],)).fetchone() == (thread_id,)
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        (job,) = await list_jobs(client)
        assert job["state"]["lastStatus"] == "error"
        assert job["state"]["lastThreadId"] == thread_id


# --- the agent's cron tool -------------------------------------------------------------


def tool_call(arguments: dict[str, Any]) -> str:
    return f"?tool cron {json.dumps(arguments)}"


async def tool_result(
    client: RpcClient, thread_id: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Run a turn calling the cron tool; returns its toolResult payload."""
    turn_id, terminal = await run_turn(client, thread_id, tool_call(arguments))
    assert terminal["method"] == "turn/completed", terminal
    turn = await read_turn(client, thread_id, turn_id)
    kinds = [item["type"] for item in turn["items"]]
    assert "approvalRequest" not in kinds  # scheduling needs no approval
    [payload] = [item["payload"] for item in turn["items"] if item["type"] == "toolResult"]
    return dict(payload)


async def test_the_agent_tool_adds_lists_and_removes_jobs(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, clock), sut.connect() as client:
        thread_id = await new_thread(client)
        mark = client.mark()
        added = await tool_result(
            client,
            thread_id,
            {"action": "add", "everySeconds": 60, "message": "tick", "name": "Ticker"},
        )
        assert added["success"] is True
        answer = json.loads(added["result"])
        assert answer["status"] == "created" and answer["name"] == "Ticker"
        assert answer["nextRunAtMs"] == T0 + MINUTE
        job_id = answer["id"]
        [changed] = state_changes(client, mark)
        assert changed["job"]["threadId"] == thread_id
        assert changed["job"]["schedule"] == {"kind": "every", "everyMs": MINUTE}

        once = json.loads(
            (
                await tool_result(
                    client, thread_id, {"action": "add", "delaySeconds": 30, "message": "once"}
                )
            )["result"]
        )
        daily = json.loads(
            (
                await tool_result(
                    client,
                    thread_id,
                    {
                        "action": "add",
                        "dailyTime": "09:30",
                        "timeZone": "Europe/Berlin",
                        "message": "d",
                    },
                )
            )["result"]
        )
        cron = json.loads(
            (
                await tool_result(
                    client, thread_id, {"action": "add", "cronExpr": "0 12 * * *", "message": "c"}
                )
            )["result"]
        )
        jobs = {job["id"]: job for job in await list_jobs(client)}
        assert jobs[once["id"]]["schedule"] == {"kind": "at", "atMs": T0 + 30_000}
        assert jobs[once["id"]]["deleteAfterRun"] is True
        assert jobs[once["id"]]["name"] == "once"  # named after the message
        assert jobs[daily["id"]]["schedule"] == {
            "kind": "daily",
            "dailyHour": 9,
            "dailyMinute": 30,
            "tz": "Europe/Berlin",
        }
        assert jobs[cron["id"]]["state"]["nextRunAtMs"] == epoch_ms("2100-01-04T12:00:00")

        listed = json.loads((await tool_result(client, thread_id, {"action": "list"}))["result"])
        assert listed["count"] == 4
        assert [job["id"] for job in listed["jobs"]] == [
            job_id,
            once["id"],
            daily["id"],
            cron["id"],
        ]
        assert listed["jobs"][0]["schedule"] == "every"

        # The tool's job runs in the thread that made it.
        mark = client.mark()
        clock.advance(30_000)
        assert (await job_result(client, mark, once["id"]))["threadId"] == thread_id
        clock.advance(30_000)
        result = await job_result(client, mark, job_id)
        assert result["threadId"] == thread_id and result["result"] == "You said: tick"

        removed = await tool_result(client, thread_id, {"action": "remove", "jobId": job_id})
        assert json.loads(removed["result"]) == {"status": "removed", "jobId": job_id}
        missing = await tool_result(client, thread_id, {"action": "remove", "jobId": job_id})
        assert json.loads(missing["result"]) == {"status": "not_found", "jobId": job_id}
        assert job_id not in {job["id"] for job in await list_jobs(client)}


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"action": "explode"}, "unknown action 'explode'"),
        ({"action": "add", "everySeconds": 60}, "missing required argument: message"),
        ({"action": "add", "message": "m"}, "give exactly one schedule"),
        (
            {"action": "add", "message": "m", "everySeconds": 60, "dailyHour": 9},
            "got every/delay and daily",
        ),
        ({"action": "add", "message": "m", "everySeconds": 0}, "everySeconds must be at least 1"),
        # Past 64 bits once in ms, and past the 100-year / year-9999 bounds.
        (
            {"action": "add", "message": "m", "everySeconds": 2**62},
            "everySeconds: must be at most 100 years",
        ),
        (
            {"action": "add", "message": "m", "everySeconds": 60, "delaySeconds": 2**62},
            "delaySeconds: must be at most 100 years",
        ),
        (
            {"action": "add", "message": "m", "delaySeconds": 10**13},
            "delaySeconds: must be at most 253402300799999",
        ),
        (
            {"action": "add", "message": "m" * 100_001, "everySeconds": 60},
            "message must be at most 100000 characters",
        ),
        (
            {"action": "add", "message": "m", "name": "n" * 1001, "everySeconds": 60},
            "name must be at most 1000 characters",
        ),
        ({"action": "add", "message": "m", "dailyTime": "9h30"}, "dailyTime must look like HH:mm"),
        ({"action": "add", "message": "m", "dailyMinute": 5}, "dailyHour is required"),
        (
            {"action": "add", "message": "m", "dailyHour": 9, "timeZone": "Mars/Base"},
            "timeZone: unknown time zone 'Mars/Base'",
        ),
        ({"action": "add", "message": "m", "cronExpr": "* *"}, "cronExpr: must have 5 fields"),
        (
            {"action": "add", "message": "m", "everySeconds": 5, "timeZone": "UTC"},
            "timeZone applies",
        ),
        ({"action": "add", "message": "m", "everySeconds": 5, "deliver": True}, "unknown argument"),
        ({"action": "remove"}, "missing required argument: jobId"),
    ],
)
async def test_the_agent_tool_refuses_bad_arguments(
    workspace: Path, arguments: dict[str, Any], error: str
) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        thread_id = await new_thread(client)
        result = await tool_result(client, thread_id, arguments)
        assert result["success"] is False
        assert result["result"].startswith("Error: ")
        assert error in result["result"], result["result"]
        assert await list_jobs(client) == []


async def test_list_jobs_and_describe_for_commands(workspace: Path) -> None:
    async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
        assert sut.app is not None and sut.app.cron is not None
        assert await sut.app.cron.describe_jobs() == "No cron jobs."
        job = await add_job(
            client, name="Report", schedule={"kind": "daily", "dailyHour": 9, "tz": "Europe/Berlin"}
        )
        await add_job(client, name="Off", enabled=False)
        jobs = await sut.app.cron.list_jobs()
        assert [j.to_wire() for j in jobs] == await list_jobs(client)
        text = await sut.app.cron.describe_jobs()
        assert f"`{job['id']}` **Report**: daily 09:00 Europe/Berlin, enabled" in text
        assert "**Off**: every 3600s, disabled" in text
