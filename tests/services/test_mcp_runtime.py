"""Live MCP connections (reference §3.9, §4): a real MCP server written with
the SDK (tests/support/mcp_echo_server.py) runs as a subprocess, over stdio
and streamable HTTP; its tools reach the agent as ``mcp__<server>__<tool>``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol import errors as rpc_errors
from appserver.tools.reaper import group_alive
from tests.support.client import RpcClient
from tests.support.mcp_helpers import (
    ECHO_SERVER,
    ECHO_TOOLS,
    STARTUP,
    broken_config,
    call,
    current_status,
    echo_config,
    http_echo_server,
    statuses,
    wait_status,
)
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import new_thread, one_item, run_turn

SILENT = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # never answers


async def upsert(
    client: RpcClient, config: dict[str, Any], expect: str | None = "ready"
) -> dict[str, Any]:
    """``mcp/upsert``, then the server's settled status (checked against ``expect``)."""
    mark = client.mark()
    await client.request("mcp/upsert", {"server": config})
    status = await wait_status(client, config["name"], start=mark)
    assert expect is None or status["startupState"] == expect, status
    return status


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_stdio_server_becomes_ready(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        mark = client.mark()
        await client.request("mcp/upsert", {"server": echo_config()})
        ready = await wait_status(client, "echo", start=mark)
        assert [s["startupState"] for s in statuses(client, "echo", mark)] == ["starting", "ready"]
        assert ready == {
            "name": "echo",
            "enabled": True,
            "startupState": "ready",
            "toolCount": ECHO_TOOLS,
            "resourceCount": 1,
            "resourceTemplateCount": 1,
            "transport": "stdio",
            "origin": {"kind": "workspace"},
            "readOnly": False,
        }
        assert (await client.request("mcp/status/list"))["servers"] == [ready]
        assert multi_server.app is not None
        tools = multi_server.app.engine.tools
        assert {f"mcp__echo__{t}" for t in ("echo", "add", "fail", "crash")} <= set(tools.names())
        echo = tools.get("mcp__echo__echo")
        assert echo is not None and "Return the text unchanged." in echo.description
        assert echo.input_schema["type"] == "object"
        assert echo.input_schema["required"] == ["text"]


async def test_turn_calls_an_mcp_tool(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        await upsert(client, echo_config())
        thread_id = await new_thread(client)
        turn_id, terminal = await run_turn(
            client, thread_id, '?tool mcp__echo__echo {"text": "hello mcp"}', timeout=20
        )
        assert terminal["method"] == "turn/completed"
        call_item = one_item(client, turn_id, "toolCall")
        assert call_item["payload"]["toolName"] == "mcp__echo__echo"
        assert call_item["payload"]["arguments"] == {"text": "hello mcp"}
        result = one_item(client, turn_id, "toolResult")
        assert result["payload"] == {
            "callId": call_item["payload"]["callId"],
            "result": "hello mcp",
            "success": True,
        }
        # MCP tools run without an approval request.
        assert not [m for m in client.messages if m.get("method") == "item/approval/request"]
        message = one_item(client, turn_id, "agentMessage")
        assert message["payload"]["text"] == "mcp__echo__echo returned: hello mcp"


async def test_tool_errors_and_timeouts_are_failed_results(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, echo_config(toolTimeoutSec=0.5))
        failed = await call(client, "mcp__echo__fail", {"message": "nothing to see"})
        assert failed["success"] is False
        assert failed["result"] == "Error executing tool fail: nothing to see"
        added = await call(client, "mcp__echo__add", {"a": 2, "b": 40})
        assert added == {**added, "result": "42", "success": True}
        bad = await call(client, "mcp__echo__add", {"a": "two"})
        assert bad["success"] is False and "Error" in bad["result"]
        slow = await call(client, "mcp__echo__sleep", {"seconds": 30})
        assert slow["success"] is False
        assert slow["result"] == "Error: MCP server 'echo': no answer within 0.5 s"
        # A slow call does not take the server down.
        status = (await client.request("mcp/status/list"))["servers"][0]
        assert status["startupState"] == "ready"


async def test_crashed_server_is_reported_and_its_tools_removed(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, echo_config())
        mark = client.mark()
        crashed = await call(client, "mcp__echo__crash")
        assert crashed["success"] is False
        assert crashed["result"].startswith("Error: MCP server 'echo': ")
        error = await wait_status(client, "echo", ("error",), start=mark)
        assert error["lastError"].startswith("connection lost: ")
        assert error["toolCount"] == 0
        assert sut.app is not None
        assert not [n for n in sut.app.engine.tools.names() if n.startswith("mcp__")]
        # Upserting again reconnects.
        assert (await upsert(client, echo_config()))["startupState"] == "ready"


async def test_broken_command_reports_error(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        mark = client.mark()
        error = await upsert(client, broken_config(), expect="error")
        assert [s["startupState"] for s in statuses(client, "broken", mark)] == [
            "starting",
            "error",
        ]
        assert error["lastError"] == "Connection closed (stderr: cannot start: no config)"
        missing = await upsert(
            client, {"name": "missing", "command": "/no/such/binary"}, expect="error"
        )
        assert missing["startupState"] == "error"
        assert missing["lastError"] == "No such file or directory: /no/such/binary"
        # Failures never stop the rest from working.
        assert (await upsert(client, echo_config()))["startupState"] == "ready"
        listed = {
            s["name"]: s["startupState"]
            for s in (await client.request("mcp/status/list"))["servers"]
        }
        assert listed == {"broken": "error", "echo": "ready", "missing": "error"}


async def test_startup_timeout(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        config = {
            "name": "silent",
            "command": SILENT[0],
            "args": SILENT[1:],
            "startupTimeoutSec": 0.5,
        }
        error = await upsert(client, config, expect="error")
        assert error["lastError"] == "timed out after 0.5 s while connecting"


async def test_upsert_reconnects_and_remove_disconnects(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, echo_config())
        first = int((await call(client, "mcp__echo__pid"))["result"])
        mark = client.mark()
        await upsert(client, echo_config(env={"ROUND": "2"}))
        assert [s["startupState"] for s in statuses(client, "echo", mark)] == ["starting", "ready"]
        second = int((await call(client, "mcp__echo__pid"))["result"])
        assert second != first and process_gone(first)
        assert (await call(client, "mcp__echo__env", {"name": "ROUND"}))["result"] == "2"
        mark = client.mark()
        await client.request("mcp/upsert", {"server": echo_config(enabled=False)})
        assert (await wait_status(client, "echo", start=mark))["startupState"] == "disabled"
        assert sut.app is not None
        assert "mcp__echo__echo" not in sut.app.engine.tools
        # A write's follow-up (reconcile, then configChanged) finishes before the
        # connection's next request runs: by then the stopped session is closed.
        await client.request("mcp/status/list")
        assert process_gone(second)
        await upsert(client, echo_config())
        third = int((await call(client, "mcp__echo__pid"))["result"])
        await client.request("mcp/remove", {"name": "echo"})
        assert (await client.request("mcp/status/list")) == {"servers": []}
        assert "mcp__echo__echo" not in sut.app.engine.tools
        assert process_gone(third)


async def test_environment_and_working_directory(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHO_PASSED", "from-the-host")
    monkeypatch.setenv("ECHO_NOT_PASSED", "hidden")
    (workspace / "sub").mkdir()
    config = echo_config(
        env={"ECHO_SET": "from-config"}, envVars=["ECHO_PASSED", "ECHO_ABSENT"], cwd="sub"
    )
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, config)
        for name, value in (
            ("ECHO_SET", "from-config"),
            ("ECHO_PASSED", "from-the-host"),
            ("ECHO_NOT_PASSED", "<unset>"),
            ("ECHO_ABSENT", "<unset>"),
        ):
            assert (await call(client, "mcp__echo__env", {"name": name}))["result"] == value
        assert (await call(client, "mcp__echo__cwd"))["result"] == str(workspace / "sub")
        await upsert(client, echo_config())  # no cwd: the workspace
        assert (await call(client, "mcp__echo__cwd"))["result"] == str(workspace)


async def test_streamable_http_with_a_bearer_token(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        http_echo_server("authorization=Bearer s3cret") as url,
        running_server("memory", workspace) as sut,
        sut.connect() as client,
    ):
        config = {
            "name": "web",
            "transport": "streamableHttp",
            "url": url,
            "bearerTokenEnvVar": "ECHO_TOKEN",
            "startupTimeoutSec": STARTUP,
        }
        missing = await upsert(client, config, expect="error")
        assert missing["lastError"] == (
            "environment variable ECHO_TOKEN (bearerTokenEnvVar) is not set"
        )
        monkeypatch.setenv("ECHO_TOKEN", "wrong")
        refused = await upsert(client, config, expect="error")
        assert refused["lastError"] == "Server returned an error response (HTTP 401 Unauthorized)"
        monkeypatch.setenv("ECHO_TOKEN", "s3cret")
        ready = await upsert(client, config)
        assert ready["startupState"] == "ready" and ready["transport"] == "streamableHttp"
        assert ready["toolCount"] == ECHO_TOOLS
        echoed = await call(client, "mcp__web__echo", {"text": "over http"})
        assert echoed["result"] == "over http" and echoed["success"] is True
        test = await client.request("mcp/test", {"server": config})
        assert test == {"success": True, "toolCount": ECHO_TOOLS}


async def test_http_headers_from_config_and_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHO_KEY", "k1")
    async with (
        http_echo_server("x-api-key=k1") as url,
        running_server("memory", workspace) as sut,
        sut.connect() as client,
    ):
        direct = {
            "name": "direct",
            "url": url,
            "httpHeaders": {"X-Api-Key": "k1"},
            "startupTimeoutSec": STARTUP,
        }
        assert await client.request("mcp/test", {"server": direct}) == {
            "success": True,
            "toolCount": ECHO_TOOLS,
        }
        from_env = {
            "name": "env",
            "url": url,
            "envHttpHeaders": {"X-Api-Key": "ECHO_KEY"},
            "startupTimeoutSec": STARTUP,
        }
        assert (await upsert(client, from_env))["startupState"] == "ready"


async def test_mcp_test_probes_without_storing(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        ok = await client.request("mcp/test", {"server": echo_config()}, timeout=STARTUP + 10)
        assert ok == {"success": True, "toolCount": ECHO_TOOLS}
        broken = await client.request("mcp/test", {"server": broken_config()})
        assert broken == {
            "success": False,
            "errorCode": "McpServerTestFailed",
            "errorMessage": "Connection closed (stderr: cannot start: no config)",
        }
        silent = {"name": "s", "command": SILENT[0], "args": SILENT[1:], "startupTimeoutSec": 0.3}
        timed_out = await client.request("mcp/test", {"server": silent})
        assert timed_out["errorMessage"] == "timed out after 0.3 s while connecting"
        off = await client.request("mcp/test", {"server": echo_config(enabled=False)})
        assert off == {"success": False}
        # Nothing was stored, connected or announced.
        assert await client.request("mcp/list") == {"servers": []}
        assert await client.request("mcp/status/list") == {"servers": []}
        assert client.notifications("mcp/status/updated") == []
        assert client.notifications("workspace/configChanged") == []
        assert multi_server.app is not None
        assert not [n for n in multi_server.app.engine.tools.names() if n.startswith("mcp__")]


async def test_mcp_test_default_timeout_is_five_seconds(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        silent = {"name": "s", "command": SILENT[0], "args": SILENT[1:]}
        started = anyio.current_time()
        result = await client.request("mcp/test", {"server": silent}, timeout=20)
        assert result["errorMessage"] == "timed out after 5 s while connecting"
        assert anyio.current_time() - started < 8


async def test_servers_start_in_the_background_after_a_restart(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, echo_config())
        silent = {
            "name": "silent",
            "command": SILENT[0],
            "args": SILENT[1:],
            "startupTimeoutSec": 30,
        }
        await client.request("mcp/upsert", {"server": silent})
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        # A server that never finishes starting does not hold anything up.
        assert sut.app is not None and sut.app.ready
        assert (
            await client.request(
                "thread/list", {"identity": {"channelName": "cli", "userId": "local"}}
            )
        )["data"] == []
        assert (await current_status(client, "silent", ("starting",)))["startupState"] == "starting"
        assert (await current_status(client, "echo"))["startupState"] == "ready"
        assert (await call(client, "mcp__echo__echo", {"text": "again"}))["result"] == "again"


async def test_shutdown_closes_sessions(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, echo_config())
        pid = int((await call(client, "mcp__echo__pid"))["result"])
    assert process_gone(pid)


async def test_unknown_mcp_tool_is_a_failed_result(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        result = await call(client, "mcp__ghost__echo")
        assert result == {
            **result,
            "success": False,
            "result": "Error: unknown tool 'mcp__ghost__echo'",
        }


async def test_status_list_before_anything_is_configured(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        assert await client.request("mcp/status/list") == {"servers": []}
        failure = await client.fail("mcp/get", {"name": "nothing"})
        assert failure.code == rpc_errors.MCP_SERVER_NOT_FOUND


async def test_what_a_server_left_in_its_group_ends_with_its_session(workspace: Path) -> None:
    """The SDK kills a server's group only if the server outlives its grace; one
    that exits at once left its children running, holding its stderr pipe."""
    script = 'trap "" TERM; sleep 300 & exec "$0" "$1"'
    config = echo_config(command="sh", args=["-c", script, sys.executable, ECHO_SERVER])
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, config)
        group = int((await call(client, "mcp__echo__pid"))["result"])  # its own session
        await client.request("mcp/remove", {"name": "echo"})
        await client.request("mcp/status/list")  # the stopped session is closed by now
        assert not group_alive(group)
