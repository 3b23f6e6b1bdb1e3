"""The MCP configuration methods (reference §3.9, §7): list, get, upsert,
remove, validation, notifications and persistence. Servers here are
disabled, so nothing is spawned; live connections are in test_mcp_runtime.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol import errors as rpc_errors
from tests.support.client import RpcClient
from tests.support.mcp_helpers import echo_config, wait_status
from tests.support.servers import ServerUnderTest, running_server

WORKSPACE_ORIGIN = {"kind": "workspace"}


def disabled(name: str = "echo", **fields: Any) -> dict[str, Any]:
    return echo_config(name, enabled=False, **fields)


async def upsert(client: RpcClient, config: dict[str, Any]) -> dict[str, Any]:
    server: dict[str, Any] = (await client.request("mcp/upsert", {"server": config}))["server"]
    return server


async def names(client: RpcClient) -> list[str]:
    return [server["name"] for server in (await client.request("mcp/list"))["servers"]]


async def test_capabilities_are_advertised(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        caps = (await client.initialize())["capabilities"]
        assert caps["mcpManagement"] is True
        assert caps["mcpStatus"] is True
        assert caps["mcpServerOrigins"] is True


async def test_round_trip(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        assert await client.request("mcp/list") == {"servers": []}
        assert await client.request("mcp/status/list") == {"servers": []}
        config = disabled(env={"A": "1"}, envVars=["HOME"], cwd="sub", toolTimeoutSec=5)
        stored = await upsert(client, config)
        assert stored == {
            **config,
            "transport": "stdio",
            "origin": WORKSPACE_ORIGIN,
            "readOnly": False,
        }
        assert (await client.request("mcp/get", {"name": "ECHO"}))["server"] == stored
        assert (await client.request("mcp/list"))["servers"] == [stored]
        assert await client.request("mcp/remove", {"name": "Echo"}) == {"removed": True}
        assert await client.request("mcp/list") == {"servers": []}
        failure = await client.fail("mcp/get", {"name": "echo"})
        assert failure.code == rpc_errors.MCP_SERVER_NOT_FOUND
        assert failure.message == "MCP server not found: echo"


async def test_upsert_replaces_by_case_insensitive_name(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        await upsert(client, disabled("Echo", args=["one"]))
        await upsert(client, disabled("beta"))
        replaced = await upsert(client, disabled("echo", args=["two"]))
        assert replaced["name"] == "echo" and replaced["args"] == ["two"]
        assert await names(client) == ["beta", "echo"]


async def test_list_is_sorted_by_name(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        for name in ("zeta", "Alpha", "mid"):
            await upsert(client, disabled(name))
        assert await names(client) == ["Alpha", "mid", "zeta"]


def http(**fields: Any) -> dict[str, Any]:
    return {
        "name": "web",
        "transport": "streamableHttp",
        "url": "https://example.com/mcp",
        **fields,
    }


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"name": "  ", "command": "x"}, "'name' is required."),
    ({"name": "x" * 129, "command": "x"}, "'name' must be at most 128 characters."),
    ({"name": "a\nb", "command": "x"}, "'name' must not contain control characters."),
    ({"name": "s"}, "'command' is required for the stdio transport."),
    ({"name": "s", "command": "  "}, "'command' is required for the stdio transport."),
    (
        {"name": "s", "command": "x", "url": "https://e.com"},
        "'url' is not allowed with the stdio transport.",
    ),
    (
        {"name": "s", "command": "x", "bearerTokenEnvVar": "T"},
        "'bearerTokenEnvVar' is not allowed with the stdio transport.",
    ),
    (
        {"name": "s", "command": "x", "httpHeaders": {"X": "1"}},
        "'httpHeaders' is not allowed with the stdio transport.",
    ),
    (
        {"name": "s", "command": "x", "envHttpHeaders": {"X": "V"}},
        "'envHttpHeaders' is not allowed with the stdio transport.",
    ),
    (http(url=None), "'url' is required for the streamableHttp transport."),
    (http(url="/mcp"), "'url' must be an absolute http or https URL."),
    (http(url="ftp://e.com/mcp"), "'url' must be an absolute http or https URL."),
    (http(command="node"), "'command' is not allowed with the streamableHttp transport."),
    (http(args=["a"]), "'args' is not allowed with the streamableHttp transport."),
    (http(env={"A": "1"}), "'env' is not allowed with the streamableHttp transport."),
    (http(envVars=["A"]), "'envVars' is not allowed with the streamableHttp transport."),
    (http(cwd="/tmp"), "'cwd' is not allowed with the streamableHttp transport."),
    (http(startupTimeoutSec=0), "'startupTimeoutSec' must be a positive number of seconds."),
    (http(toolTimeoutSec=-1), "'toolTimeoutSec' must be a positive number of seconds."),
    ({"name": "s", "command": "x", "env": {" ": "1"}}, "'env' must not have empty names."),
    ({"name": "s", "command": "x", "envVars": [""]}, "'envVars' must not contain empty names."),
]


@pytest.mark.parametrize(("config", "detail"), INVALID)
async def test_validation_failures(workspace: Path, config: dict[str, Any], detail: str) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        for method in ("mcp/upsert", "mcp/test"):
            failure = await client.fail(method, {"server": config})
            assert failure.code == rpc_errors.MCP_SERVER_VALIDATION_FAILED, failure
            assert failure.message == "MCP server validation failed"
            assert failure.data == {"detail": detail}
        assert await client.request("mcp/list") == {"servers": []}


async def test_transport_spellings(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        for spelling in ("streamable-http", "http", "STREAMABLEHTTP", "streamable_http"):
            stored = await upsert(client, http(transport=spelling, enabled=False))
            assert stored["transport"] == "streamableHttp"
        only_url = await upsert(client, {"name": "u", "url": "http://127.0.0.1:9/mcp"})
        assert only_url["transport"] == "streamableHttp"
        # Anything else is stdio (which then needs a command).
        stored = await upsert(client, disabled("odd", transport="websocket"))
        assert stored["transport"] == "stdio"
        failure = await client.fail("mcp/upsert", {"server": {"name": "odd", "transport": "ws"}})
        assert failure.data == {"detail": "'command' is required for the stdio transport."}


async def test_values_are_trimmed_and_empty_ones_dropped(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        stored = await upsert(
            client,
            {"name": "  spaced  ", "enabled": False, "command": " node ", "args": [], "env": {}},
        )
        assert stored == {
            "name": "spaced",
            "enabled": False,
            "transport": "stdio",
            "command": "node",
            "origin": WORKSPACE_ORIGIN,
            "readOnly": False,
        }
        # Output-only fields sent by a client are ignored.
        stored = await upsert(
            client, disabled("o", origin={"kind": "plugin", "pluginId": "x"}, readOnly=True)
        )
        assert stored["origin"] == WORKSPACE_ORIGIN and stored["readOnly"] is False


async def test_malformed_params_are_invalid_params(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        for method, params in (
            ("mcp/upsert", {}),
            ("mcp/upsert", {"server": {"command": "x"}}),
            ("mcp/upsert", {"server": {"name": "x", "command": "y", "args": "not-a-list"}}),
            ("mcp/test", {"server": "x"}),
            ("mcp/get", {}),
            ("mcp/get", {"name": "  "}),
            ("mcp/remove", {"name": 3}),
        ):
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.INVALID_PARAMS, (method, params, failure)


async def test_remove_unknown_is_not_found(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        failure = await client.fail("mcp/remove", {"name": "ghost"})
        assert failure.code == rpc_errors.MCP_SERVER_NOT_FOUND
        assert failure.message == "MCP server not found: ghost"


async def test_writes_notify_every_connection(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("a") as a, multi_server.connect("b") as b:
        await upsert(a, disabled())
        for client in (a, b):
            changed = await client.notification("workspace/configChanged")
            assert changed["source"] == "mcp/upsert" and changed["regions"] == ["mcp"]
            status = await wait_status(client, "echo")
            assert status == {
                "name": "echo",
                "enabled": False,
                "startupState": "disabled",
                "toolCount": 0,
                "resourceCount": 0,
                "resourceTemplateCount": 0,
                "transport": "stdio",
                "origin": WORKSPACE_ORIGIN,
                "readOnly": False,
            }
        # The caller gets its response before the notifications.
        responses = [i for i, m in enumerate(a.messages) if "server" in m.get("result", {})]
        notices = [
            i
            for i, m in enumerate(a.messages)
            if m.get("method") in ("workspace/configChanged", "mcp/status/updated")
        ]
        assert responses and notices and responses[0] < notices[0]
        mark = b.mark()
        await a.request("mcp/remove", {"name": "echo"})
        changed = await b.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "mcp/remove"
        assert (await b.request("mcp/status/list")) == {"servers": []}


async def test_config_change_opt_out(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("quiet", capabilities={"configChange": False}) as quiet:
        await upsert(quiet, disabled())
        await wait_status(quiet, "echo")  # status updates still arrive
        assert quiet.notifications("workspace/configChanged") == []


async def test_configurations_survive_a_restart(workspace: Path) -> None:
    config = disabled(args=[sys.executable, "-V"], toolTimeoutSec=7)
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        stored = await upsert(client, config)
        await upsert(client, disabled("second"))
        await client.request("mcp/remove", {"name": "second"})
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        assert (await client.request("mcp/list"))["servers"] == [stored]
        listed = (await client.request("mcp/status/list"))["servers"]
        assert [(s["name"], s["startupState"]) for s in listed] == [("echo", "disabled")]
    # State lives in SQLite, never in DotCraft's config.json.
    assert not (workspace / ".craft" / "config.json").exists()
