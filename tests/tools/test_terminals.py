"""Background terminals end to end: the model's ``shell`` with ``run_in_background``
(a ``backgrounded`` commandExecution item), ``write_stdin`` and ``stop_terminal``,
``terminal/list|read|write|stop|clean``, ``terminal/*`` notifications only to
connections that declared ``backgroundTerminals``, the output file and DotCraft's
truncation fields, ``lost`` after the server died, no orphan (docs/tools.md,
"Background terminals")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol import errors as rpc_errors
from appserver.tools.base import ToolContext, ToolError
from appserver.tools.reaper import group_alive
from appserver.tools.shell import ShellTool
from appserver.tools.terminal_snapshots import limit_output
from appserver.tools.terminal_tools import StopTerminalTool, WriteStdinTool
from tests.support.client import RpcClient
from tests.support.servers import (
    ProcessStream,
    ServerUnderTest,
    child_env,
    running_server,
    server_command,
)
from tests.support.turns import new_thread, one_item, run_turn

TERMINALS = {"backgroundTerminals": True, "commandExecutionStreaming": True}


def _tool(name: str, **arguments: Any) -> str:
    return f"?tool {name} {json.dumps(arguments)}"


def _background(command: str, **extra: Any) -> str:
    return _tool("shell", command=command, run_in_background=True, **extra)


def _deltas(client: RpcClient, session_id: str) -> str:
    return "".join(
        m["params"]["delta"]
        for m in client.notifications("terminal/outputDelta")
        if m["params"]["terminal"]["sessionId"] == session_id
    )


async def _wait_output(client: RpcClient, session_id: str, text: str) -> None:
    """Until the live output of ``session_id`` contains ``text``."""
    await client.wait(lambda _: text in _deltas(client, session_id))


async def _start(client: RpcClient, thread_id: str, command: str, **extra: Any) -> dict[str, Any]:
    """The model runs ``command`` in the background; its commandExecution item."""
    mark = client.mark()
    turn_id, end = await run_turn(client, thread_id, _background(command, **extra))
    assert end["method"] == "turn/completed"
    return one_item(client, turn_id, "commandExecution", mark)["payload"]


async def _pid(client: RpcClient, session_id: str) -> int:
    """The command's first line is ``$$``: its shell's pid, its process group."""
    await client.wait(lambda _: "\n" in _deltas(client, session_id))
    return int(_deltas(client, session_id).split("\n", 1)[0])


async def _group_gone(pgid: int) -> None:
    # Nothing tells us when an unrelated process group is gone: poll, bounded.
    with anyio.fail_after(10):
        while group_alive(pgid):
            await anyio.sleep(0.02)


async def _tool_result(client: RpcClient, thread_id: str, text: str) -> dict[str, Any]:
    mark = client.mark()
    turn_id, _ = await run_turn(client, thread_id, text)
    return dict(one_item(client, turn_id, "toolResult", mark)["payload"])


def test_output_is_limited_as_dotcraft_does() -> None:
    assert limit_output("", 0, 10) == ("(no output)", 0, False)
    assert limit_output("abc\n\n", 5, 10) == ("abc", 3, False)
    assert limit_output("abcdef\n", 7, 4) == ("... (truncated, 2 earlier chars)\ncdef", 6, True)
    # The kept tail is shorter than the whole output: earlier characters count too.
    assert limit_output("xyz", 10, 0) == ("... (truncated, 7 earlier chars)\nxyz", 10, True)


async def test_model_runs_reads_writes_a_background_command(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        init = await client.initialize(TERMINALS)
        assert init["capabilities"]["backgroundTerminals"] is True
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        command = "echo ready; read line; echo got:$line; exit 3"
        item = await _start(client, thread_id, command, interactive=True, yield_time_ms=20)
        session_id = item["sessionId"]
        assert session_id.startswith("term_") and len(session_id) == 17
        assert item["status"] == "backgrounded"
        assert item["backgroundReason"] == "runInBackground"
        output_path = Path(item["outputPath"])
        assert output_path == server.workspace / ".craft" / "terminals" / thread_id / (
            f"{session_id}.log"
        )
        assert isinstance(item["originalOutputChars"], int) and item["truncated"] is False
        assert "exitCode" not in item

        started = await client.notification("terminal/started")
        terminal = started["terminal"]
        assert terminal["sessionId"] == session_id and terminal["status"] == "running"
        assert terminal["threadId"] == thread_id and terminal["command"] == command
        assert terminal["source"] == "host" and terminal["callId"] == item["callId"]
        await _wait_output(client, session_id, "ready\n")

        # A client writes a line; write waits until the command ends (before yieldTimeMs).
        written = await client.request(
            "terminal/write", {"sessionId": session_id, "input": "hi\n", "yieldTimeMs": 10000}
        )
        ended = written["terminal"]
        assert ended["status"] == "failed" and ended["exitCode"] == 3
        assert ended["output"] == "ready\ngot:hi" and ended["originalOutputChars"] == 12
        assert ended["completedAt"] and ended["wallTimeMs"] >= 0
        completed = await client.notification("terminal/completed")
        assert completed["terminal"]["status"] == "failed"
        assert output_path.read_text() == "ready\ngot:hi\n"

        read = (await client.request("terminal/read", {"sessionId": session_id}))["terminal"]
        assert read["output"] == "ready\ngot:hi" and read["truncated"] is False
        short = await client.request(
            "terminal/read", {"sessionId": session_id, "maxOutputChars": 3}
        )
        assert short["terminal"]["output"] == "... (truncated, 9 earlier chars)\n:hi"
        assert short["terminal"]["truncated"] is True
        assert short["terminal"]["originalOutputChars"] == 12

        listed = await client.request("terminal/list", {"threadId": thread_id})
        assert [t["sessionId"] for t in listed["terminals"]] == [session_id]
        assert (await client.request("terminal/list", {"threadId": "nope"}))["terminals"] == []

        failure = await client.fail("terminal/read", {"sessionId": "term_000000000000"})
        assert (
            failure.code == rpc_errors.TERMINAL_NOT_FOUND
            and "was not found" in failure.data["detail"]
        )
        failure = await client.fail("terminal/write", {"sessionId": session_id, "input": "x"})
        assert (
            failure.code == rpc_errors.TERMINAL_NOT_WRITABLE
            and "is not running" in failure.data["detail"]
        )


async def test_model_polls_writes_and_stops_its_terminal(server: ServerUnderTest) -> None:
    async with server.connect(capabilities=TERMINALS) as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        item = await _start(client, thread_id, "echo $$; cat", interactive=True, yield_time_ms=1)
        session_id = item["sessionId"]
        pid = await _pid(client, session_id)

        result = await _tool_result(
            client,
            thread_id,
            _tool("write_stdin", session_id=session_id, input="ping\n", yield_time_ms=1),
        )
        assert result["success"] is True
        assert f"Session ID: {session_id}" in result["result"]
        assert "Status: running" in result["result"]
        await _wait_output(client, session_id, "ping\n")
        polled = await _tool_result(
            client, thread_id, _tool("write_stdin", session_id=session_id, yield_time_ms=1)
        )
        assert polled["success"] is True and "ping" in polled["result"]

        # Another thread's model cannot reach it.
        other = await new_thread(client, approvalPolicy="autoApprove")
        refused = await _tool_result(client, other, _tool("stop_terminal", session_id=session_id))
        assert refused["success"] is False and "was not found" in refused["result"]
        assert group_alive(pid)

        stopped = await _tool_result(
            client, thread_id, _tool("stop_terminal", session_id=session_id)
        )
        assert stopped["success"] is True and "Status: killed" in stopped["result"]
        assert not group_alive(pid)  # stop returns once the group is gone
        completed = await client.notification("terminal/completed")
        assert completed["terminal"]["status"] == "killed"
        assert "exitCode" not in completed["terminal"]


async def test_stop_and_clean_kill_whole_groups(server: ServerUnderTest) -> None:
    async with server.connect(capabilities=TERMINALS) as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        # A command that started a child of its own: both die with the terminal.
        first = await _start(client, thread_id, "echo $$; sleep 60 & wait", yield_time_ms=1)
        second = await _start(client, thread_id, "echo $$; exec sleep 60", yield_time_ms=1)
        pids = [await _pid(client, item["sessionId"]) for item in (first, second)]

        failure = await client.fail(
            "terminal/write", {"sessionId": first["sessionId"], "input": "x"}
        )
        assert (
            failure.code == rpc_errors.TERMINAL_NOT_WRITABLE
            and "interactive" in failure.data["detail"]
        )
        polled = await client.request(
            "terminal/write", {"sessionId": first["sessionId"], "yieldTimeMs": 1}
        )
        assert polled["terminal"]["status"] == "running"

        stopped = await client.request("terminal/stop", {"sessionId": first["sessionId"]})
        assert stopped["terminal"]["status"] == "killed"
        assert not group_alive(pids[0])
        again = await client.request("terminal/stop", {"sessionId": first["sessionId"]})
        assert again["terminal"]["status"] == "killed"

        mark = client.mark()
        cleaned = await client.request("terminal/clean", {"threadId": thread_id})
        assert {t["sessionId"]: t["status"] for t in cleaned["terminals"]} == {
            first["sessionId"]: "killed",
            second["sessionId"]: "killed",
        }
        assert not group_alive(pids[1])
        notes = await client.notification("terminal/cleaned", start=mark)
        assert notes["terminal"]["sessionId"] == second["sessionId"]
        methods = [
            m["method"] for m in client.since(mark) if m.get("method", "").startswith("terminal/")
        ]
        assert methods == ["terminal/completed", "terminal/cleaned"]


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_notifications_only_for_connections_that_asked(kind: str, workspace: Path) -> None:
    async with running_server(kind, workspace) as server:
        muted = {"backgroundTerminals": True, "optOutNotificationMethods": ["terminal/outputDelta"]}
        async with (
            server.connect("shows", capabilities=TERMINALS) as shows,
            server.connect("plain") as plain,
            server.connect("muted", capabilities=muted) as quiet,
        ):
            thread_id = await new_thread(shows, approvalPolicy="autoApprove")
            item = await _start(shows, thread_id, "echo one", yield_time_ms=10000)
            # It ended before yield_time_ms: the item is the command's end, with its terminal.
            assert item["status"] == "completed" and item["exitCode"] == 0
            session_id = item["sessionId"]
            completed = await shows.notification("terminal/completed")
            assert completed["terminal"]["output"] == "one"
            assert _deltas(shows, session_id) == "one\n"
            await quiet.notification("terminal/completed")
            await plain.settle()
            await quiet.settle()
            assert plain.notifications("terminal/started") == []
            assert plain.notifications("terminal/completed") == []
            assert quiet.notifications("terminal/outputDelta") == []
            assert [m["method"] for m in quiet.notifications() if "terminal/" in m["method"]] == [
                "terminal/started",
                "terminal/completed",
            ]
            # The methods do not depend on the client's flag (it is about notifications).
            listed = await plain.request("terminal/list")
            assert [t["sessionId"] for t in listed["terminals"]] == [session_id]


async def test_clean_shutdown_stops_terminals(workspace: Path) -> None:
    async with (
        running_server("memory", workspace) as server,
        server.connect(capabilities=TERMINALS) as client,
    ):
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        item = await _start(client, thread_id, "echo $$; exec sleep 60", yield_time_ms=1)
        pid = await _pid(client, item["sessionId"])
    assert not group_alive(pid)  # the server stopped it before it closed
    async with running_server("memory", workspace) as server, server.connect() as client:
        read = await client.request("terminal/read", {"sessionId": item["sessionId"]})
        assert read["terminal"]["status"] == "killed"
        assert read["terminal"]["output"] == str(pid)


@asynccontextmanager
async def _stdio_server(workspace: Path) -> AsyncIterator[tuple[Any, RpcClient]]:
    """A server process of our own (to kill it), and a client over its stdio."""
    async with await anyio.open_process(server_command(workspace), env=child_env()) as process:
        client = RpcClient(ProcessStream(process))
        async with anyio.create_task_group() as tg:
            await client.run(tg)
            await client.initialize(TERMINALS)
            try:
                yield process, client
            finally:
                tg.cancel_scope.cancel()
                if process.returncode is None:
                    process.kill()


async def test_a_killed_server_leaves_no_orphan_and_a_lost_terminal(workspace: Path) -> None:
    async with _stdio_server(workspace) as (process, client):
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        item = await _start(client, thread_id, "echo $$; exec sleep 60", yield_time_ms=1)
        pid = await _pid(client, item["sessionId"])
        assert group_alive(pid)
        process.kill()  # SIGKILL: no shutdown hook runs
        await process.wait()
    await _group_gone(pid)  # the watchdog killed it
    async with running_server("memory", workspace) as server, server.connect() as client:
        listed = await client.request("terminal/list", {"threadId": thread_id})
        [lost] = listed["terminals"]
        assert lost["sessionId"] == item["sessionId"] and lost["status"] == "lost"
        assert lost["completedAt"] and lost["output"] == str(pid)
        assert lost["outputPath"] == item["outputPath"]
        failure = await client.fail("terminal/write", {"sessionId": lost["sessionId"]})
        assert (
            failure.code == rpc_errors.TERMINAL_NOT_WRITABLE
            and "is not running" in failure.data["detail"]
        )
        stopped = await client.request("terminal/stop", {"sessionId": lost["sessionId"]})
        assert stopped["terminal"]["status"] == "lost"


async def test_large_output_is_in_the_file_and_truncated(workspace: Path) -> None:
    size = 5 * 1024 * 1024  # more than the 1 MiB kept in memory and sent live
    async with (
        running_server("memory", workspace) as server,
        server.connect(capabilities=TERMINALS) as client,
    ):
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        command = f"head -c {size} /dev/zero | tr '\\0' x; echo"
        item = await _start(client, thread_id, command, yield_time_ms=30000, max_output_chars=5)
        assert item["status"] == "completed"
        assert item["originalOutputChars"] == size and item["truncated"] is True
        assert Path(item["outputPath"]).stat().st_size == size + 1
        session_id = item["sessionId"]
        await client.notification("terminal/completed")
        assert len(_deltas(client, session_id)) == 1024 * 1024  # live output stops there
        read = await client.request("terminal/read", {"sessionId": session_id, "maxOutputChars": 4})
        assert read["terminal"]["output"] == f"... (truncated, {size - 4} earlier chars)\nxxxx"
        assert read["terminal"]["originalOutputChars"] == size
        whole = await client.request(
            "terminal/read", {"sessionId": session_id, "maxOutputChars": 0}
        )
        # At most the 1 MiB kept (its last character was the newline).
        kept = 1024 * 1024 - 1
        assert whole["terminal"]["output"] == (
            f"... (truncated, {size - kept} earlier chars)\n" + "x" * kept
        )
        assert whole["terminal"]["truncated"] is True


@pytest.mark.parametrize("kind", ["stdio", "websocket"])
async def test_python_client_lists_reads_stops_and_cleans(kind: str, workspace: Path) -> None:
    from tests.clients.test_client_api import IDENTITY, open_client

    with anyio.fail_after(30):
        async with open_client(kind, workspace, capabilities=TERMINALS) as client:
            assert client.server_capabilities["backgroundTerminals"] is True
            started = await client.thread_start(
                identity=IDENTITY,
                config={"approvalPolicy": "autoApprove"},  # type: ignore[typeddict-item]
            )
            thread_id = started["thread"]["id"]
            outcome = await client.run_turn(
                thread_id, _background("exec sleep 60", yield_time_ms=1)
            )
            assert outcome.ok
            [result] = [i for i in outcome.items if i["type"] == "toolResult"]
            [terminal] = (await client.terminal_list(thread_id=thread_id))["terminals"]
            assert f"Session ID: {terminal['sessionId']}" in result["payload"]["result"]
            assert terminal["status"] == "running" and terminal["output"] == "(no output)"
            read = await client.terminal_read(session_id=terminal["sessionId"], wait_ms=1)
            assert read["terminal"]["status"] == "running"
            cleaned = await client.terminal_clean(thread_id=thread_id)
            assert [t["status"] for t in cleaned["terminals"]] == ["killed"]
            stopped = await client.terminal_stop(session_id=terminal["sessionId"])
            assert stopped["terminal"]["status"] == "killed"


async def test_archive_stops_and_delete_removes_a_threads_terminals(workspace: Path) -> None:
    async with (
        running_server("memory", workspace) as server,
        server.connect(capabilities=TERMINALS) as client,
    ):
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        item = await _start(client, thread_id, "echo $$; exec sleep 60", yield_time_ms=1)
        pid = await _pid(client, item["sessionId"])
        await client.request("thread/archive", {"threadId": thread_id})
        assert not group_alive(pid)  # as DotCraft's archive: the thread's terminals stop
        cleaned = await client.notification("terminal/cleaned")
        assert cleaned["terminal"]["status"] == "killed"
        output = Path(item["outputPath"])
        assert output.read_text() == f"{pid}\n"
        await client.request("thread/delete", {"threadId": thread_id})
        assert not output.parent.exists()
        assert (await client.request("terminal/list"))["terminals"] == []


async def test_shell_arguments_and_tools_without_the_service(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")
    shell = ShellTool()
    with pytest.raises(ToolError, match="interactive needs run_in_background"):
        shell.plan({"command": "cat", "interactive": True}, ctx)
    with pytest.raises(ToolError, match="yield_time_ms must be an integer"):
        shell.plan({"command": "true", "run_in_background": True, "yield_time_ms": "1"}, ctx)
    plan = shell.plan({"command": "true", "run_in_background": True}, ctx)
    assert plan.approval is not None and plan.approval.kind == "shell"  # approved as any command
    outcome = await shell.run(plan, ctx)
    assert not outcome.success and "not available here" in outcome.output
    for tool in (WriteStdinTool(), StopTerminalTool()):
        tool_plan = tool.plan({"session_id": "term_x"}, ctx)
        assert tool_plan.approval is None
        outcome = await tool.run(tool_plan, ctx)
        assert not outcome.success and "not available here" in outcome.output


async def test_the_default_tail_and_what_an_ended_command_left_running(
    server: ServerUnderTest,
) -> None:
    async with server.connect(capabilities=TERMINALS) as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        command = "seq 1 30000; echo pid $$; sleep 60 >/dev/null 2>&1 &"
        result = await _tool_result(client, thread_id, _background(command, yield_time_ms=5000))
        # No max_output_chars: the model gets the default tail, not the 1 MiB kept.
        assert len(result["result"]) < 11_000
        assert "truncated" in result["result"]
        pgid = int(result["result"].rsplit("pid ", 1)[1].split()[0])
        (listed,) = (await client.request("terminal/list", {"threadId": thread_id}))["terminals"]
        assert listed["status"] == "completed"
        # The command ended, its `sleep 60 &` did not: stopping the terminal ends it.
        assert group_alive(pgid)
        await client.request("terminal/stop", {"sessionId": listed["sessionId"]})
        await _group_gone(pgid)


async def test_an_interrupted_start_does_not_leave_its_terminal_running(
    server: ServerUnderTest,
) -> None:
    async with server.connect(capabilities=TERMINALS) as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        mark = client.mark()
        turn = await client.request(
            "turn/start",
            {
                "threadId": thread_id,
                "input": [{"type": "text", "text": _background("sleep 60", yield_time_ms=30000)}],
            },
        )
        started = await client.notification("terminal/started", start=mark)
        await client.request(
            "turn/interrupt", {"threadId": thread_id, "turnId": turn["turn"]["id"]}
        )
        ended = await client.notification("terminal/completed", start=mark)
        assert ended["terminal"]["sessionId"] == started["terminal"]["sessionId"]
        assert ended["terminal"]["status"] == "killed"


class _MemoryStore:
    """A TerminalStore in a dict (the manager's own rules, without SQLite)."""

    def __init__(self) -> None:
        self.rows: dict[str, Any] = {}

    async def put(self, terminal: Any) -> None:
        self.rows[terminal.session_id] = terminal

    async def get(self, session_id: str) -> Any:
        return self.rows.get(session_id)

    async def list_terminals(self, thread_id: str | None = None) -> list[Any]:
        return [t for t in self.rows.values() if thread_id in (None, t.thread_id)]

    async def running(self) -> list[Any]:
        return [t for t in self.rows.values() if t.status == "running"]


async def test_concurrent_starts_keep_the_per_thread_limit(tmp_path: Path) -> None:
    from appserver.tools.terminals import (
        MAX_RUNNING_PER_THREAD,
        TerminalError,
        TerminalManager,
    )

    manager = TerminalManager(tmp_path / "terminals", _MemoryStore())
    started: list[str] = []
    refused: list[str] = []

    async def start() -> None:
        try:
            terminal = await manager.start(
                thread_id="t1",
                turn_id=None,
                call_id=None,
                command="sleep 30",
                cwd=tmp_path,
                argv=["bash", "-c", "sleep 30"],
                env={"PATH": "/usr/bin:/bin"},
                yield_ms=1,
            )
            started.append(terminal.session_id)
        except TerminalError as exc:
            refused.append(str(exc))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            manager._tg = tg  # what run() sets; nothing stored to recover here
            async with anyio.create_task_group() as starts:
                for _ in range(MAX_RUNNING_PER_THREAD + 4):
                    starts.start_soon(start)
            assert len(started) == MAX_RUNNING_PER_THREAD and len(refused) == 4
            await manager.shutdown()
            tg.cancel_scope.cancel()


async def test_what_an_ended_command_left_running_keeps_its_output(
    server: ServerUnderTest, workspace: Path
) -> None:
    async with server.connect(capabilities=TERMINALS) as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        command = "(sleep 0.8; echo later; touch alive) & echo started"  # past the drain
        item = await _start(client, thread_id, command, yield_time_ms=5000)
        assert item["status"] == "completed"
        # Its child writes after the command ended: not killed by SIGPIPE, and logged.
        with anyio.fail_after(10):
            while not (workspace / "alive").exists():  # nothing announces a file
                await anyio.sleep(0.02)
        await _wait_output(client, item["sessionId"], "later")
        read = await client.request("terminal/read", {"sessionId": item["sessionId"]})
        assert read["terminal"]["output"].split() == ["started", "later"]
