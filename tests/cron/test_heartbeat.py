"""The heartbeat end to end (reference §3.6): heartbeat/trigger, the periodic timer on an
injected clock, `system/jobResult {source: "heartbeat"}` and the heartbeat thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appserver.cron.heartbeat import heartbeat_prompt, is_empty
from appserver.cron.heartbeat_timer import configured_interval
from tests.support.client import RpcClient
from tests.support.cron_servers import T0, clocked_server, write_config
from tests.support.helpers import identity
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import read_turn

EMPTY = """# Heartbeat

<!-- Add tasks below. The agent checks them
     every heartbeat. -->

## Tasks
   <!-- none yet --> <!-- really -->

"""


def write_heartbeat(workspace: Path, content: str) -> None:
    craft = workspace / ".craft"
    craft.mkdir(exist_ok=True)
    (craft / "HEARTBEAT.md").write_text(content, "utf-8")


async def heartbeat_threads(client: RpcClient) -> list[dict[str, Any]]:
    ident = identity(channelName="heartbeat", userId="heartbeat")
    threads: list[dict[str, Any]] = (await client.request("thread/list", {"identity": ident}))[
        "data"
    ]
    return threads


async def test_nothing_runs_without_a_heartbeat_file(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        assert await client.request("heartbeat/trigger") == {}
        assert await client.request("heartbeat/trigger", {}) == {}
        await client.settle()
        assert client.notifications("system/jobResult") == []
        assert await heartbeat_threads(client) == []


async def test_nothing_runs_for_an_empty_heartbeat_file(server: ServerUnderTest) -> None:
    write_heartbeat(server.workspace, EMPTY)
    async with server.connect() as client:
        assert await client.request("heartbeat/trigger") == {}
        await client.settle()
        assert client.notifications("system/jobResult") == []
        assert await heartbeat_threads(client) == []


async def test_a_heartbeat_runs_a_turn_and_reports_its_result(server: ServerUnderTest) -> None:
    write_heartbeat(server.workspace, "# Tasks\n\n- Check the build\n")
    async with server.connect() as client:
        mark = client.mark()
        result = await client.request("heartbeat/trigger")
        text = result["result"]
        assert set(result) == {"result"}
        assert text.startswith("You said: Heartbeat check. Current HEARTBEAT.md content:")
        assert "- Check the build" in text
        assert "respond with HEARTBEAT_OK" in text
        announced = await client.notification("system/jobResult", start=mark)
        [thread] = await heartbeat_threads(client)
        assert announced == {
            "source": "heartbeat",
            "threadId": thread["id"],
            "result": text,
            "tokenUsage": announced["tokenUsage"],
        }
        assert announced["tokenUsage"]["outputTokens"] > 0
        assert thread["displayName"] == "Heartbeat"
        turn = await read_turn(client, thread["id"], "turn_001")
        user = turn["items"][0]["payload"]
        assert user["text"] == heartbeat_prompt("# Tasks\n\n- Check the build\n")
        assert (user["triggerKind"], user["triggerLabel"]) == ("heartbeat", "Heartbeat")
        # The next heartbeat reuses the thread.
        await client.request("heartbeat/trigger")
        await read_turn(client, thread["id"], "turn_002")
        assert len(await heartbeat_threads(client)) == 1


async def test_the_heartbeat_thread_survives_a_restart(workspace: Path) -> None:
    write_heartbeat(workspace, "ping")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await client.request("heartbeat/trigger")
        [thread] = await heartbeat_threads(client)
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        assert (await client.request("heartbeat/trigger"))["result"].startswith("You said:")
        assert [t["id"] for t in await heartbeat_threads(client)] == [thread["id"]]
        await read_turn(client, thread["id"], "turn_002")


async def test_a_failing_heartbeat_answers_with_an_error(multi_server: ServerUnderTest) -> None:
    write_heartbeat(multi_server.workspace, "?fail unavailable the model is away")
    async with multi_server.connect() as client, multi_server.connect("watcher") as watcher:
        result = await client.request("heartbeat/trigger")
        assert set(result) == {"error"}
        assert "the model is away" in result["error"]
        announced = await watcher.notification("system/jobResult")
        assert announced["source"] == "heartbeat"
        assert announced["error"] == result["error"]
        assert "result" not in announced


def trigger_frame(request_id: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "heartbeat/trigger"}


async def test_concurrent_triggers_run_one_after_the_other(workspace: Path) -> None:
    write_heartbeat(workspace, "?stream 4")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await client.send(trigger_frame("hb-1"))
        await client.send(trigger_frame("hb-2"))
        expected = {"result": "chunk 1 chunk 2 chunk 3 chunk 4 "}
        assert (await client.response("hb-1"))["result"] == expected
        assert (await client.response("hb-2"))["result"] == expected
        [thread] = await heartbeat_threads(client)
        first = await read_turn(client, thread["id"], "turn_001")
        second = await read_turn(client, thread["id"], "turn_002")
        assert first["completedAt"] <= second["startedAt"]


async def test_trigger_does_not_block_the_connection(workspace: Path) -> None:
    # heartbeat/trigger is "detached": the connection's other requests are
    # answered while it runs (here it waits on an approval we hold back).
    write_heartbeat(workspace, "hello")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await client.request("heartbeat/trigger")
        [thread] = await heartbeat_threads(client)
        await client.request("thread/subscribe", {"threadId": thread["id"]})
        write_heartbeat(workspace, "!echo from heartbeat")
        await client.send(trigger_frame("hb"))
        # The subscriber is asked about the heartbeat turn's shell command ...
        request = await client.wait(lambda m: m.get("method") == "item/approval/request")
        # ... and the connection still answers other requests meanwhile.
        assert len(await heartbeat_threads(client)) == 1
        assert not any(m.get("id") == "hb" for m in client.messages)
        await client.send({"jsonrpc": "2.0", "id": request["id"], "result": {"decision": "accept"}})
        reply = await client.response("hb")
        assert reply["result"] == {"result": "The command exited with code 0."}


# --- the periodic timer ---------------------------------------------------------------


async def test_periodic_heartbeats_follow_the_workspace_config(workspace: Path) -> None:
    write_config(workspace, {"Heartbeat": {"Enabled": True, "IntervalSeconds": 60}})
    write_heartbeat(workspace, "tick")
    async with clocked_server(workspace) as (sut, clock), sut.connect() as client:
        await clock.wait_sleeper(T0 + 60_000)
        assert client.notifications("system/jobResult") == []
        mark = client.mark()
        clock.advance(60_000)
        first = await client.notification("system/jobResult", start=mark)
        assert first["source"] == "heartbeat"
        assert first["result"].startswith("You said: Heartbeat check.")
        # The next one is an interval after this one ended.
        await clock.wait_sleeper(T0 + 120_000)
        mark = client.mark()
        clock.advance(60_000)
        second = await client.notification("system/jobResult", start=mark)
        assert second["threadId"] == first["threadId"]


async def test_periodic_heartbeats_are_off_by_default(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut:
        assert sut.app is not None and sut.app.heartbeat is not None
        assert sut.app.heartbeat.interval_s is None


@pytest.mark.parametrize(
    ("env", "config", "interval"),
    [
        ({}, {}, None),
        ({}, {"Heartbeat": {"Enabled": False, "IntervalSeconds": 60}}, None),
        ({}, {"heartbeat": {"enabled": True}}, 1800.0),
        ({}, {"Heartbeat": {"Enabled": True, "IntervalSeconds": 90}}, 90.0),
        ({}, {"Heartbeat": {"Enabled": True, "IntervalSeconds": -5}}, 1800.0),
        ({}, {"Heartbeat": {"Enabled": True, "IntervalSeconds": "soon"}}, 1800.0),
        ({"APPSERVER_HEARTBEAT_INTERVAL": "15"}, {}, 15.0),
        ({"APPSERVER_HEARTBEAT_INTERVAL": "0.5"}, {"Heartbeat": {"Enabled": True}}, 0.5),
        ({"APPSERVER_HEARTBEAT_INTERVAL": "0"}, {"Heartbeat": {"Enabled": True}}, None),
        ({"APPSERVER_HEARTBEAT_INTERVAL": "often"}, {}, None),
        ({"APPSERVER_HEARTBEAT_INTERVAL": " "}, {"Heartbeat": {"Enabled": True}}, 1800.0),
    ],
)
def test_configured_interval(
    env: dict[str, str], config: dict[str, Any], interval: float | None
) -> None:
    assert configured_interval(env, config) == interval


async def test_the_environment_variable_starts_the_timer(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPSERVER_HEARTBEAT_INTERVAL", "30")
    write_heartbeat(workspace, "env tick")
    async with clocked_server(workspace) as (sut, clock), sut.connect() as client:
        await clock.wait_sleeper(T0 + 30_000)
        clock.advance(30_000)
        announced = await client.notification("system/jobResult")
        assert "env tick" in announced["result"]


@pytest.mark.parametrize(
    ("content", "empty"),
    [
        ("", True),
        ("\n \n\t\n", True),
        ("# Title\n## Sub\n", True),
        ("<!-- one -->\n<!--\nmany\nlines\n-->\n", True),
        (EMPTY, True),
        ("# Title\nDo the thing\n", False),
        ("<!-- note --> do it", False),
        ("<!--\nhidden\n-->\nvisible", False),
        ("- [ ] task", False),
    ],
)
def test_what_counts_as_empty(content: str, empty: bool) -> None:
    assert is_empty(content) is empty
