"""The IDE's terminals (DotCraft's ``acpExtensions.terminalCreate``): when the
client bound to a thread runs terminals, ``shell`` runs its command there
through ``ext/acp/terminal/create|waitForExit|getOutput|kill|release``; the
sandbox and approvals come first; a timeout kills the command in the editor;
an interrupted turn kills and releases it; a client that reconnects in time
is asked again; a failure fails the tool call, not the turn (docs/tools.md)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process, TaskGroup

from appserver.runtime.turns import EngineConfig
from tests.support.client import RpcClient
from tests.support.helpers import start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import run_turn, start_turn, wait_terminal

TERMINALS = {"acpExtensions": {"terminalCreate": True}, "commandExecutionStreaming": True}
AUTO = {"approvalPolicy": "autoApprove"}


@dataclass
class Terminal:
    process: Process
    output: list[str] = field(default_factory=list)
    drained: anyio.Event = field(default_factory=anyio.Event)


class Ide:
    """An IDE that runs terminal commands as real processes (its terminals
    outlive a connection: a reconnecting window finds them again).

    ``acp_shapes``: answers in ACP's shapes (``waitForExit`` -> exit status
    only, ``getOutput`` -> ``exitStatus``/``truncated``). ``silent``: methods
    it never answers.
    """

    def __init__(self, tg: TaskGroup, *, acp_shapes: bool = False) -> None:
        self.tg = tg
        self.acp_shapes = acp_shapes
        self.silent: set[str] = set()
        self.terminals: dict[str, Terminal] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.approvals: list[dict[str, Any]] = []
        self.approve = "accept"
        self.asked = anyio.Event()

    def attach(self, client: RpcClient) -> None:
        client.on_server_request = self._handle

    async def _handle(self, method: str, params: Any) -> Any:
        if method == "item/approval/request":
            self.approvals.append(params)
            return {"decision": self.approve}
        self.requests.append((method, params))
        self.asked.set()
        self.asked = anyio.Event()
        if method in self.silent:
            return None
        if method == "ext/acp/terminal/create":
            return await self._create(params)
        terminal = self.terminals[params["terminalId"]]
        if method == "ext/acp/terminal/waitForExit":
            with anyio.move_on_after(params.get("timeout") or 30):
                await terminal.process.wait()
                await terminal.drained.wait()
            return self._output(terminal, wait=True)
        if method == "ext/acp/terminal/getOutput":
            return self._output(terminal, wait=False)
        if method == "ext/acp/terminal/kill":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(terminal.process.pid, signal.SIGKILL)
            await terminal.process.wait()
            return {}
        if method == "ext/acp/terminal/release":
            del self.terminals[params["terminalId"]]
            return {}
        raise AssertionError(method)

    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        process = await anyio.open_process(
            ["bash", "-c", params["command"]],
            cwd=params["cwd"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        terminal = Terminal(process)
        terminal_id = f"ide-term-{len(self.requests)}"
        self.terminals[terminal_id] = terminal

        async def pump() -> None:
            assert process.stdout is not None
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
                async for chunk in process.stdout:
                    terminal.output.append(chunk.decode())
            terminal.drained.set()

        self.tg.start_soon(pump)
        return {"terminalId": terminal_id}

    def _output(self, terminal: Terminal, *, wait: bool) -> dict[str, Any]:
        code = terminal.process.returncode
        text = "".join(terminal.output)
        if self.acp_shapes:
            if wait:
                return {"exitCode": code, "signal": None} if code is not None else {}
            status = None if code is None else {"exitCode": code, "signal": None}
            return {"output": text, "truncated": False, "exitStatus": status}
        answer: dict[str, Any] = {"output": text}
        if code is not None:
            answer["exitCode"] = code
        return answer

    def methods(self) -> list[str]:
        return [method.rsplit("/", 1)[1] for method, _ in self.requests]


def _result(terminal: dict[str, Any]) -> dict[str, Any]:
    (item,) = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "toolResult"]
    return dict(item["payload"])


def _command_item(client: RpcClient, turn_id: str) -> dict[str, Any]:
    (item,) = [
        m["params"]["item"]
        for m in client.messages
        if m.get("method") == "item/completed"
        and m["params"]["item"]["type"] == "commandExecution"
        and m["params"].get("turnId") == turn_id
    ]
    return dict(item["payload"])


def _shell(command: str, **arguments: Any) -> str:
    return f"?tool shell {json.dumps({'command': command, **arguments})}"


@pytest.fixture(params=["stdio", "websocket"])
async def ide_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    async with running_server(request.param, workspace) as sut:
        yield sut


async def test_shell_runs_in_the_editors_terminal(
    ide_server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            ide = Ide(tg)
            async with ide_server.connect("ide", capabilities=TERMINALS) as client:
                ide.attach(client)
                thread_id = (await start_thread(client, config=AUTO))["id"]
                turn_id, terminal = await run_turn(
                    client, thread_id, _shell("echo from the ide; pwd; exit 3", workdir="src")
                )
                assert terminal["method"] == "turn/completed"
                result = _result(terminal)
                assert result["success"] is False
                cwd = str((workspace / "src").resolve())
                assert result["result"] == f"exit code: 3\nfrom the ide\n{cwd}\n"
                assert ide.methods() == ["create", "waitForExit", "release"]
                terminal_id = ide.requests[1][1]["terminalId"]
                assert ide.requests[0][1] == {
                    "threadId": thread_id,
                    "command": "echo from the ide; pwd; exit 3",
                    "cwd": cwd,
                    "outputByteLimit": 1048576,
                }
                assert ide.requests[1][1] == {
                    "threadId": thread_id,
                    "terminalId": terminal_id,
                    "timeout": 120,
                }
                assert ide.requests[2][1] == {"threadId": thread_id, "terminalId": terminal_id}
                item = _command_item(client, turn_id)
                assert item["source"] == "editor"
                assert item["exitCode"] == 3
                assert item["status"] == "failed"
                assert "from the ide" in item["aggregatedOutput"]
                assert ide.terminals == {}


async def test_answers_in_acps_shapes(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("stdio", workspace) as sut,
            sut.connect("bridge", capabilities=TERMINALS) as client,
        ):
            ide = Ide(tg, acp_shapes=True)
            ide.attach(client)
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(client, thread_id, _shell("echo acp"))
            result = _result(terminal)
            assert result == {**result, "success": True, "result": "exit code: 0\nacp\n"}
            # The wait answered the exit only: the output was asked for.
            assert ide.methods() == ["create", "waitForExit", "getOutput", "release"]


async def test_a_timeout_kills_the_command_in_the_editor(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("websocket", workspace) as sut,
            sut.connect("ide", capabilities=TERMINALS) as client,
        ):
            ide = Ide(tg)
            ide.attach(client)
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(
                client, thread_id, _shell("echo started; sleep 30", timeout_ms=500)
            )
            assert terminal["method"] == "turn/completed"
            result = _result(terminal)
            assert result["success"] is False
            assert "timed out after 0.5 s; it was killed in the editor" in result["result"]
            assert "started" in result["result"]
            assert ide.methods() == ["create", "waitForExit", "kill", "getOutput", "release"]
            assert ide.requests[1][1]["timeout"] == 1


async def test_sandbox_and_approvals_come_first(
    ide_server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            ide = Ide(tg)
            ide.approve = "decline"
            async with ide_server.connect("ide", capabilities=TERMINALS) as client:
                ide.attach(client)
                thread_id = (await start_thread(client))["id"]
                _, terminal = await run_turn(client, thread_id, _shell("echo no"))
                assert _result(terminal)["success"] is False
                assert len(ide.approvals) == 1
                _, terminal = await run_turn(
                    client, thread_id, _shell("echo no", workdir="missing")
                )
                assert _result(terminal)["success"] is False
                assert ide.requests == []


async def test_clients_without_the_capability_run_on_the_host(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("stdio", workspace) as sut,
            sut.connect("plain", capabilities={"commandExecutionStreaming": True}) as client,
        ):
            ide = Ide(tg)
            ide.attach(client)
            thread_id = (await start_thread(client, config=AUTO))["id"]
            turn_id, terminal = await run_turn(client, thread_id, _shell("echo host"))
            assert _result(terminal)["result"] == "exit code: 0\nhost\n"
            assert ide.requests == []
            assert _command_item(client, turn_id)["source"] == "host"


async def test_an_interrupted_turn_kills_and_releases_the_terminal(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("websocket", workspace) as sut,
            sut.connect("ide", capabilities=TERMINALS) as client,
        ):
            ide = Ide(tg)
            ide.attach(client)
            thread_id = (await start_thread(client, config=AUTO))["id"]
            turn_id = await start_turn(client, thread_id, _shell("sleep 30"))
            await client.wait(lambda m: m.get("method") == "ext/acp/terminal/waitForExit")
            await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            terminal = await wait_terminal(client, turn_id)
            assert terminal["method"] == "turn/cancelled"
            await client.wait(lambda m: m.get("method") == "ext/acp/terminal/release")
            assert ide.methods()[-2:] == ["kill", "release"]
            tg.cancel_scope.cancel()


async def test_a_reconnecting_editor_is_asked_again(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("websocket", workspace) as sut,
        ):
            ide = Ide(tg)
            ide.silent.add("ext/acp/terminal/waitForExit")
            async with sut.connect("ide", capabilities=TERMINALS) as first:
                ide.attach(first)
                thread_id = (await start_thread(first, config=AUTO))["id"]
                turn_id = await start_turn(first, thread_id, _shell("echo again"))
                await first.wait(lambda m: m.get("method") == "ext/acp/terminal/waitForExit")
            # The window reloads: the same IDE, a new connection.
            ide.silent.clear()
            async with sut.connect("ide", capabilities=TERMINALS) as second:
                ide.attach(second)
                await second.request("thread/subscribe", {"threadId": thread_id})
                terminal = await wait_terminal(second, turn_id)
                assert terminal["method"] == "turn/completed"
                assert _result(terminal)["result"] == "exit code: 0\nagain\n"
            assert ide.methods() == ["create", "waitForExit", "waitForExit", "release"]
            assert ide.requests[1][1] == ide.requests[2][1]


async def test_an_editor_that_does_not_come_back_fails_the_call(workspace: Path) -> None:
    short = EngineConfig(approval_timeout=10, reconnect_grace=0.3)
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("websocket", workspace, engine=short) as sut,
            sut.connect("observer") as observer,
        ):
            ide = Ide(tg)
            ide.silent.add("ext/acp/terminal/waitForExit")
            async with sut.connect("ide", capabilities=TERMINALS) as client:
                ide.attach(client)
                thread_id = (await start_thread(client, config=AUTO))["id"]
                await observer.request("thread/subscribe", {"threadId": thread_id})
                turn_id = await start_turn(client, thread_id, _shell("sleep 30"))
                await client.wait(lambda m: m.get("method") == "ext/acp/terminal/waitForExit")
            terminal = await wait_terminal(observer, turn_id)
            assert terminal["method"] == "turn/completed"
            result = _result(terminal)
            assert result["success"] is False
            assert "disconnected and did not come back within 0.3s" in result["result"]
            for process in [t.process for t in ide.terminals.values()]:
                os.killpg(process.pid, signal.SIGKILL)
            tg.cancel_scope.cancel()


async def test_no_answer_to_create_in_time_fails_the_call(workspace: Path) -> None:
    short = EngineConfig(approval_timeout=0.3, reconnect_grace=0.3)
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("stdio", workspace, engine=short) as sut,
            sut.connect("ide", capabilities=TERMINALS) as client,
        ):
            ide = Ide(tg)
            ide.silent.add("ext/acp/terminal/create")
            ide.attach(client)
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(client, thread_id, _shell("echo never"))
            assert terminal["method"] == "turn/completed"
            result = _result(terminal)
            assert result["success"] is False
            assert "did not answer ext/acp/terminal/create within 0.3s" in result["result"]
            # Nothing was created, so nothing is released.
            assert ide.methods() == ["create"]


async def test_a_second_editor_resuming_does_not_answer_for_a_live_one(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            running_server("websocket", workspace) as sut,
            sut.connect("ide", capabilities=TERMINALS) as first,
            sut.connect("other-ide", capabilities=TERMINALS) as second,
        ):
            ide = Ide(tg)
            ide.attach(first)
            other = Ide(tg)
            other.attach(second)
            thread_id = (await start_thread(first, config=AUTO))["id"]
            ide.silent.add("ext/acp/terminal/waitForExit")
            turn_id = await start_turn(first, thread_id, _shell("echo mine"))
            await first.wait(lambda m: m.get("method") == "ext/acp/terminal/waitForExit")
            await second.request("thread/resume", {"threadId": thread_id})
            await second.request("thread/subscribe", {"threadId": thread_id})
            # The first editor still holds the question: the second is not asked.
            ide.silent.clear()
            waiting = [
                m for m in first.messages if m.get("method") == "ext/acp/terminal/waitForExit"
            ]
            await first.send(
                {
                    "jsonrpc": "2.0",
                    "id": waiting[-1]["id"],
                    "result": {"output": "mine\n", "exitCode": 0},
                }
            )
            terminal = await wait_terminal(second, turn_id)
            assert _result(terminal)["result"] == "exit code: 0\nmine\n"
            assert other.requests == []
            for process in [t.process for t in ide.terminals.values()]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            tg.cancel_scope.cancel()
