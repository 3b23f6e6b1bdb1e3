"""External-CLI SubAgent children (``cli-oneshot``) end to end, over every transport:
our own faces as the external agents (``appserver-zene``, ``appserver-codex``
with session resume), a slow fake CLI closed while it runs, the launch's
approval, working directories, and an untrusted workspace that runs none.

The child's process opens the same workspace (its SQLite file is shared), so
these run on the default store only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.tools.reaper import group_alive
from tests.runtime.test_subagents import call, spawn, tool_answer
from tests.support.client import RpcClient
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import Approver, new_thread, read_turn, run_turn

SLOW = """\
import json, os, subprocess, sys, time
with open(os.environ["FAKE_RECORD"], "w") as f:
    json.dump({"pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv[1:]}, f)
if os.environ.get("FAKE_SLEEP"):
    subprocess.Popen(["sleep", "60"])
    time.sleep(float(os.environ["FAKE_SLEEP"]))
print("fake answer")
"""


@pytest.fixture(autouse=True)
def our_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """`appserver` and `appserver-codex` (the venv's console scripts) on PATH, as a
    user who installed the server has them."""
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    script = tmp_path / "slow-cli"
    script.write_text(f"#!{sys.executable}\n{SLOW}")
    script.chmod(0o755)
    return script


def fake_profile(script: Path, record: Path, **fields: Any) -> dict[str, Any]:
    env = {"FAKE_RECORD": str(record), **fields.pop("env", {})}
    return {"runtime": "cli-oneshot", "bin": str(script), "env": env, **fields}


async def tool_result(client: RpcClient, thread_id: str, script: str) -> dict[str, Any]:
    """Run a turn calling one tool; its toolResult payload (success or not)."""
    turn_id, _ = await run_turn(client, thread_id, script, timeout=30)
    turn = await read_turn(client, thread_id, turn_id)
    (item,) = [item for item in turn["items"] if item["type"] == "toolResult"]
    payload: dict[str, Any] = item["payload"]
    return payload


async def answer(client: RpcClient, thread_id: str, script: str) -> dict[str, Any]:
    turn_id, _ = await run_turn(client, thread_id, script, timeout=30)
    return await tool_answer(client, thread_id, turn_id)


async def only_turns(client: RpcClient, thread_id: str) -> list[dict[str, Any]]:
    read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    turns: list[dict[str, Any]] = read["thread"]["turns"]
    return turns


def texts(turn: dict[str, Any], kind: str, key: str = "text") -> list[str]:
    return [item["payload"][key] for item in turn["items"] if item["type"] == kind]


async def test_a_zene_child_runs_our_own_face_once(server: ServerUnderTest) -> None:
    with anyio.fail_after(60):
        async with server.connect() as client:
            parent = await new_thread(client, approvalPolicy="autoApprove")
            spawned = await answer(
                client, parent, spawn("hello from the parent", profile="APPSERVER-zene")
            )
            assert spawned["status"] == "running"
            assert (spawned["profileName"], spawned["runtimeType"]) == (
                "appserver-zene",
                "cli-oneshot",
            )
            assert spawned["supportsSendInput"] is False and spawned["supportsResume"] is False
            child = spawned["childThreadId"]
            waited = await answer(client, parent, call("WaitAgent", childThreadId=child))
            assert waited["status"] == "completed"
            # The offline model echoes what it was given: the role, then the task.
            assert waited["message"].startswith("You said: ## SubAgent Role: default ")
            assert waited["message"].endswith("## Task hello from the parent")
            (turn,) = await only_turns(client, child)
            assert turn["status"] == "completed"
            assert texts(turn, "userMessage") == ["hello from the parent"]
            assert texts(turn, "agentMessage") == [waited["message"]]
            assert turn["tokenUsage"]["outputTokens"] > 0
            read = await client.request("thread/read", {"threadId": child})
            assert read["thread"]["metadata"] == {
                "subagent.syntheticRuntime": "cli-oneshot",
                "subagent.profileName": "appserver-zene",
            }
            # Without a resumable session it takes no more input.
            refused = await tool_result(
                client, parent, call("SendInput", childThreadId=child, message="more")
            )
            assert refused["success"] is False
            assert "does not support SendInput" in refused["result"]


async def test_a_codex_child_is_continued_with_its_session(server: ServerUnderTest) -> None:
    with anyio.fail_after(90):
        async with server.connect() as client:
            await client.request(
                "subagent/settings/update", {"externalCliSessionResumeEnabled": True}
            )
            parent = await new_thread(client, approvalPolicy="autoApprove")
            spawned = await answer(
                client, parent, spawn("first task", profile="appserver-codex", agentRole="worker")
            )
            assert spawned["supportsSendInput"] is True and spawned["supportsResume"] is True
            child = spawned["childThreadId"]
            waited = await answer(client, parent, call("WaitAgent", childThreadId=child))
            assert (waited["status"], waited["message"]) == ("completed", "You said: first task")
            read = await client.request("thread/read", {"threadId": parent})
            (stored,) = json.loads(read["thread"]["metadata"]["dotcraft.externalCliSessions"])
            assert stored["profileName"] == "appserver-codex" and stored["label"] == "first task"
            session = stored["sessionId"]
            sent = await answer(
                client, parent, call("SendInput", childThreadId=child, message="second task")
            )
            assert sent["status"] == "running"
            waited = await answer(client, parent, call("WaitAgent", childThreadId=child))
            assert (waited["status"], waited["message"]) == ("completed", "You said: second task")
            assert [turn["status"] for turn in await only_turns(client, child)] == [
                "completed",
                "completed",
            ]
            # The second run continued the Codex thread of the first (`resume <id>`).
            codex_turns = await only_turns(client, session)
            assert [texts(turn, "userMessage") for turn in codex_turns] == [
                ["first task"],
                ["second task"],
            ]


async def test_closing_a_running_external_child_kills_its_command(
    server: ServerUnderTest, fake_cli: Path, tmp_path: Path
) -> None:
    record = tmp_path / "record.json"
    with anyio.fail_after(60):
        async with server.connect() as client:
            definition = fake_profile(fake_cli, record, env={"FAKE_SLEEP": "60"})
            await client.request(
                "subagent/profiles/upsert", {"name": "slow", "definition": definition}
            )
            parent = await new_thread(client, approvalPolicy="autoApprove")
            child = (await answer(client, parent, spawn("take your time", profile="slow")))[
                "childThreadId"
            ]
            while not record.exists() or not record.read_text():
                await anyio.sleep(0.05)
            pid = json.loads(record.read_text())["pid"]
            mark = client.mark()
            wait_turn, _ = await run_turn(
                client, parent, call("WaitAgent", childThreadId=child, timeoutSeconds=0.2)
            )
            assert (await tool_answer(client, parent, wait_turn))["status"] == "timeout"
            # The waiting turn's last progress shows the command's stage.
            (entry,) = [
                m["params"]["entries"]
                for m in client.messages[mark:]
                if m.get("method") == "subagent/progress"
                and (m["params"]["threadId"], m["params"]["turnId"]) == (parent, wait_turn)
            ][-1]
            assert (entry["currentTool"], entry["currentToolDisplay"]) == (
                "external-cli",
                "Waiting for slow-cli to finish.",
            )
            assert entry["isCompleted"] is False and entry["childThreadId"] == child
            closed = await answer(client, parent, call("CloseAgent", childThreadId=child))
            assert closed["status"] == "closed"
            (turn,) = await only_turns(client, child)
            assert turn["status"] == "cancelled"
            assert texts(turn, "userMessage") == ["take your time"]
            assert not group_alive(pid)  # the command and the sleep it started


async def test_the_launch_is_asked_and_a_specified_directory_is_used(
    server: ServerUnderTest, fake_cli: Path, tmp_path: Path, workspace: Path
) -> None:
    record = tmp_path / "record.json"
    (workspace / "sub").mkdir()
    with anyio.fail_after(60):
        async with server.connect() as client:
            approver = Approver(client, "accept")
            definition = fake_profile(fake_cli, record, workingDirectoryMode="specified")
            await client.request(
                "subagent/profiles/upsert", {"name": "here", "definition": definition}
            )
            parent = await new_thread(client)
            missing = await tool_result(client, parent, spawn("x", profile="here"))
            assert "requires a specified working directory" in missing["result"]
            absent = await tool_result(
                client, parent, spawn("x", profile="here", workingDirectory="nope")
            )
            assert absent["result"].endswith("Subagent working directory 'nope' does not exist.")
            spawned = await answer(
                client, parent, spawn("in sub", profile="here", workingDirectory="sub")
            )
            child = spawned["childThreadId"]
            request = (await approver.wait_request())["params"]
            assert request["threadId"] == child and request["approvalType"] == "shell"
            assert request["operation"] == str(fake_cli)
            assert request["target"] == str((workspace / "sub").resolve())
            assert request["subAgent"]["parentThreadId"] == parent
            waited = await answer(client, parent, call("WaitAgent", childThreadId=child))
            assert (waited["status"], waited["message"]) == ("completed", "fake answer")
            seen = json.loads(record.read_text())
            assert seen["cwd"] == str((workspace / "sub").resolve())
            assert seen["argv"][-1].endswith("## Task\n\nin sub")
            read = await client.request("thread/read", {"threadId": child})
            assert read["thread"]["workspacePath"] == str((workspace / "sub").resolve())


async def test_unknown_and_disabled_profiles_are_refused(server: ServerUnderTest) -> None:
    with anyio.fail_after(30):
        async with server.connect() as client:
            parent = await new_thread(client)
            unknown = await tool_result(client, parent, spawn("x", profile="nobody"))
            assert unknown["success"] is False
            assert "Unknown subagent profile 'nobody'." in unknown["result"]
            await client.request(
                "subagent/profiles/setEnabled", {"name": "appserver-zene", "enabled": False}
            )
            disabled = await tool_result(client, parent, spawn("x", profile="appserver-zene"))
            assert "Subagent profile 'appserver-zene' is disabled." in disabled["result"]
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert listed["data"] == []


async def test_an_untrusted_workspace_runs_no_external_child(
    workspace: Path, fake_cli: Path, tmp_path: Path
) -> None:
    record = tmp_path / "record.json"
    # A .craft/ that came with the checkout: the workspace is not trusted.
    craft = workspace / ".craft"
    craft.mkdir()
    profiles = {"SubAgentProfiles": {"evil": {"Runtime": "cli-oneshot", "Bin": str(fake_cli)}}}
    (craft / "config.json").write_text(json.dumps(profiles))
    with anyio.fail_after(30):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            parent = await new_thread(client, approvalPolicy="autoApprove")
            refused = await tool_result(client, parent, spawn("x", profile="evil"))
            assert refused["success"] is False and "not trusted" in refused["result"]
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            assert listed["data"] == []
            # A native child still runs.
            native = await answer(client, parent, spawn("native one"))
            assert native["profileName"] == "native"
    assert not record.exists()


async def test_the_agent_is_told_the_profiles_it_may_use(
    server: ServerUnderTest, fake_cli: Path, tmp_path: Path
) -> None:
    definition = fake_profile(fake_cli, tmp_path / "record.json", workingDirectoryMode="specified")
    with anyio.fail_after(30):
        async with server.connect() as client:
            await client.request(
                "subagent/profiles/upsert", {"name": "here", "definition": definition}
            )
            await client.request(
                "subagent/profiles/setEnabled", {"name": "appserver-codex", "enabled": False}
            )
            shown = await client.request("prompt/read", {})
            (environment,) = [s["text"] for s in shown["sections"] if s["kind"] == "environment"]
            line = environment.splitlines()[-1]
            assert line.startswith(
                "- SubAgent profiles (SpawnAgent `profile`): `native` (default), "
            )
            assert "`appserver-zene` (external agent CLI)" in line
            assert "`here` (external agent CLI; needs `workingDirectory`)" in line
            assert "appserver-codex" not in line  # disabled
            # A thread that may not spawn is told nothing of them.
            quiet = await new_thread(client, agentControlToolAccess="disabled")
            shown = await client.request("prompt/read", {"threadId": quiet})
            assert "SubAgent profiles" not in shown["text"]
            if server.app is not None:
                tool = server.app.runtime.engine.tools.get("SpawnAgent")
                assert tool is not None
                described = tool.input_schema["properties"]["profile"]["description"]
                assert "appserver-zene" in described and "here" in described


async def test_a_child_spawned_before_resuming_was_on_says_so_once_continued(
    server: ServerUnderTest,
) -> None:
    """SendInput is judged by the setting now; the edge it answers with follows."""
    with anyio.fail_after(90):
        async with server.connect() as client:
            parent = await new_thread(client, approvalPolicy="autoApprove")
            spawned = await answer(
                client, parent, spawn("first task", profile="appserver-codex", agentRole="worker")
            )
            assert spawned["supportsSendInput"] is False
            child = spawned["childThreadId"]
            await answer(client, parent, call("WaitAgent", childThreadId=child))
            await client.request(
                "subagent/settings/update", {"externalCliSessionResumeEnabled": True}
            )
            sent = await answer(
                client, parent, call("SendInput", childThreadId=child, message="second task")
            )
            assert sent["status"] == "running"
            assert sent["supportsSendInput"] is True and sent["supportsResume"] is True
            listed = await client.request("subagent/children/list", {"parentThreadId": parent})
            (entry,) = listed["data"]
            assert entry["edge"]["supportsSendInput"] is True
            await answer(client, parent, call("WaitAgent", childThreadId=child))
