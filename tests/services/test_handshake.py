"""The ``initialize`` / ``initialized`` handshake (reference §2, DotCraft's
AppServerHandshakeTests and AppServerNotificationOptOutTests)."""

from __future__ import annotations

from typing import Any

from appserver import __version__
from appserver.protocol import errors as rpc_errors
from appserver.protocol.methods import FEATURE_FLAGS, METHODS
from tests.support.helpers import IDENTITY, assert_error_frame, start_thread, without_seq
from tests.support.servers import ServerUnderTest

CLIENT_INFO = {"name": "handshake-test", "title": "Handshake Test", "version": "2.3.4"}
AWAITING = "Server is awaiting the 'initialized' notification before handling requests."


def init_params(**capabilities: Any) -> dict[str, Any]:
    return {"clientInfo": CLIENT_INFO, "capabilities": capabilities}


async def test_server_info(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        result = await client.request("initialize", init_params())
        info = result["serverInfo"]
        assert info["name"] == "appserver"
        assert info["version"] == __version__
        assert info["protocolVersion"] == "1"
        assert isinstance(info["extensions"], list)
        assert all(isinstance(name, str) for name in info["extensions"])
        assert isinstance(result["capabilities"]["extensions"], dict)


# DotCraft capability flags (reference §2) and a method of each family.
DOTCRAFT_FAMILIES = {
    "cronManagement": "cron/list",
    "heartbeatManagement": "heartbeat/trigger",
    "skillsManagement": "skills/list",
    "pluginManagement": "plugin/list",
    "commandManagement": "command/list",
    "modelCatalogManagement": "model/list",
    "workspaceConfigManagement": "workspace/config/read",
    "mcpManagement": "mcp/list",
    "mcpStatus": "mcp/status/list",
    "externalChannelManagement": "externalChannel/list",
    "subAgentManagement": "subagent/profiles/list",
    "subAgentSessions": "subagent/children/list",
    "channelStatus": "channel/status",
    "automations": "automation/task/list",
    "backgroundTerminals": "terminal/list",
}


async def test_capabilities_are_exactly_the_served_families(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        caps = (await client.initialize())["capabilities"]
        assert isinstance(caps.pop("extensions"), dict)
        assert all(value is True for value in caps.values()), caps
        flags = set(caps)
        assert {"threadManagement", "threadSubscriptions", "modeSwitch", "configOverride"} <= flags

        # Probe every gated method with params that can never validate: the
        # handler never runs, and the answer tells whether the method is served.
        served: dict[str, bool] = {}
        for spec in METHODS.values():
            if spec.capability is None:
                continue
            failure = await client.fail(spec.name, [0])
            assert failure.code in (rpc_errors.METHOD_NOT_FOUND, rpc_errors.INVALID_PARAMS), (
                spec.name,
                failure,
            )
            ok = failure.code == rpc_errors.INVALID_PARAMS
            served[spec.capability] = served.get(spec.capability, True) and ok
        assert {flag for flag, ok in served.items() if ok} <= flags
        assert not {flag for flag, ok in served.items() if not ok} & flags
        assert flags - set(served) <= FEATURE_FLAGS
        # A family with no method in the table is never advertised.
        for flag in DOTCRAFT_FAMILIES:
            if flag not in served and flag not in FEATURE_FLAGS:
                assert flag not in flags, flag


async def test_unimplemented_family_is_method_not_found(server: ServerUnderTest) -> None:
    unknown = [m for m in DOTCRAFT_FAMILIES.values() if m not in METHODS]
    unknown += ["dreams/list", "agent/profiles/list", "no/such/method", "thread/explode"]
    async with server.connect() as client:
        for method in unknown:
            failure = await client.fail(method, {})
            assert failure.code == rpc_errors.METHOD_NOT_FOUND
            assert failure.message == f"Method not found: {method}"


async def test_second_initialize_is_refused(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        await client.request("initialize", init_params())
        # Still waiting for `initialized`: a second initialize is refused too.
        failure = await client.fail("initialize", init_params())
        assert (failure.code, failure.message) == (
            rpc_errors.ALREADY_INITIALIZED,
            "Already initialized",
        )
        await client.notify("initialized")
        failure = await client.fail("initialize", init_params())
        assert (failure.code, failure.message) == (
            rpc_errors.ALREADY_INITIALIZED,
            "Already initialized",
        )
        assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_requests_before_initialize(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        for method, params in [
            ("thread/list", {"identity": IDENTITY}),
            ("thread/start", {"identity": IDENTITY}),
            ("turn/start", {"threadId": "x", "input": []}),
            ("no/such/method", None),
        ]:
            failure = await client.fail(method, params)
            assert (failure.code, failure.message) == (
                rpc_errors.NOT_INITIALIZED,
                "Not initialized",
            )
        # An early `initialized` notification is ignored, not remembered.
        await client.notify("initialized")
        await client.request("initialize", init_params())
        failure = await client.fail("thread/list", {"identity": IDENTITY})
        assert failure.code == rpc_errors.INVALID_REQUEST


async def test_request_between_initialize_and_initialized(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        await client.request("initialize", init_params())
        failure = await client.fail("thread/list", {"identity": IDENTITY})
        assert failure.code == rpc_errors.INVALID_REQUEST
        assert failure.data == {"detail": AWAITING}
        await client.notify("initialized")
        assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_invalid_initialize_leaves_the_connection_uninitialized(
    server: ServerUnderTest,
) -> None:
    async with server.connect(initialize=False) as client:
        failure = await client.fail("initialize", {"clientInfo": {"name": "x"}})
        assert failure.code == rpc_errors.INVALID_PARAMS
        assert failure.data == {"detail": "'clientInfo.version' is required."}
        failure = await client.fail("initialize", None)
        assert failure.data == {"detail": "'clientInfo' is required."}
        failure = await client.fail("thread/list", {"identity": IDENTITY})
        assert failure.code == rpc_errors.NOT_INITIALIZED
        await client.initialize()
        assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_pipelined_handshake(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        frames = [
            {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": init_params()},
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {
                "jsonrpc": "2.0",
                "id": "list",
                "method": "thread/list",
                "params": {"identity": IDENTITY},
            },
            {
                "jsonrpc": "2.0",
                "id": "start",
                "method": "thread/start",
                "params": {"identity": IDENTITY},
            },
        ]
        for frame in frames:
            await client.send(frame)
        init = await client.response("init")
        listed = await client.response("list")
        started = await client.response("start")
        assert init["result"]["serverInfo"]["protocolVersion"] == "1"
        assert listed["result"] == {"data": []}
        assert started["result"]["thread"]["status"] == "active"


async def test_pipelined_request_without_initialized_is_refused(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        await client.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params()}
        )
        await client.send(
            {"jsonrpc": "2.0", "id": 2, "method": "thread/list", "params": {"identity": IDENTITY}}
        )
        assert "result" in await client.response(1)
        error = assert_error_frame(await client.response(2), rpc_errors.INVALID_REQUEST, 2)
        assert error["data"] == {"detail": AWAITING}


async def test_initialized_then_thread_list(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client)
        listed = await client.request("thread/list", {"identity": IDENTITY})
        assert [summary["id"] for summary in listed["data"]] == [thread["id"]]


async def test_capability_defaults_accept_unknown_members(server: ServerUnderTest) -> None:
    caps = {"approvalSupport": False, "someFutureCapability": {"x": 1}, "streamingSupport": True}
    async with server.connect(capabilities=caps) as client:
        assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_opt_out_is_per_connection(multi_server: ServerUnderTest) -> None:
    opt_out = {"optOutNotificationMethods": ["thread/started", "not/a/real/method"]}
    async with (
        multi_server.connect("quiet", capabilities=opt_out) as quiet,
        multi_server.connect("loud") as loud,
    ):
        quiet_mark, loud_mark = quiet.mark(), loud.mark()
        mine = await start_thread(quiet)
        theirs = await start_thread(loud)
        await loud.notification("thread/started", where=lambda p: p["thread"]["id"] == mine["id"])
        await loud.notification("thread/started", where=lambda p: p["thread"]["id"] == theirs["id"])
        await quiet.settle()
        assert quiet.since(quiet_mark, "thread/started") == []
        assert len(loud.since(loud_mark, "thread/started")) == 2
        # Other notifications still reach the opted-out connection.
        await loud.request("thread/rename", {"threadId": mine["id"], "displayName": "Named"})
        renamed = await quiet.notification("thread/renamed", start=quiet_mark)
        assert without_seq(renamed) == {"threadId": mine["id"], "displayName": "Named"}


async def test_opt_out_on_single_connection(server: ServerUnderTest) -> None:
    caps = {"optOutNotificationMethods": ["thread/started", "thread/renamed"]}
    async with server.connect(capabilities=caps) as client:
        mark = client.mark()
        thread = await start_thread(client)
        await client.request("thread/rename", {"threadId": thread["id"], "displayName": "x"})
        await client.request("thread/pause", {"threadId": thread["id"]})
        changed = await client.notification("thread/statusChanged", start=mark)
        assert changed["newStatus"] == "paused"
        await client.settle()
        methods = [m["method"] for m in client.since(mark) if "method" in m]
        assert methods == ["thread/statusChanged"]


async def test_no_notifications_before_initialized(multi_server: ServerUnderTest) -> None:
    async with (
        multi_server.connect("active") as active,
        multi_server.connect("halfway", initialize=False) as halfway,
        multi_server.connect("fresh", initialize=False) as fresh,
    ):
        await halfway.request("initialize", init_params())
        thread = await start_thread(active)
        await active.notification("thread/started")
        await active.request("thread/rename", {"threadId": thread["id"], "displayName": "a"})
        await active.notification("thread/renamed")

        # A request round-trip on each waiting connection: anything delivered
        # to it earlier would have been written before this answer.
        assert (await halfway.fail("thread/list", {"identity": IDENTITY})).code == -32600
        assert (await fresh.fail("thread/list", {"identity": IDENTITY})).code == -32002
        assert all("method" not in m for m in halfway.messages)
        assert all("method" not in m for m in fresh.messages)

        # Once `initialized` arrives, the connection is in the broadcast set.
        await halfway.notify("initialized")
        await halfway.settle()
        await active.request("thread/rename", {"threadId": thread["id"], "displayName": "b"})
        renamed = await halfway.notification("thread/renamed")
        assert renamed["displayName"] == "b"
        assert halfway.notifications("thread/started") == []


async def test_each_connection_has_its_own_handshake(multi_server: ServerUnderTest) -> None:
    async with (
        multi_server.connect("one") as one,
        multi_server.connect("two", initialize=False) as two,
    ):
        assert (
            await two.fail("thread/list", {"identity": IDENTITY})
        ).code == rpc_errors.NOT_INITIALIZED
        assert (await one.request("thread/list", {"identity": IDENTITY}))["data"] == []
        await two.initialize()
        assert (await one.fail("initialize", init_params())).code == rpc_errors.ALREADY_INITIALIZED
        assert (await two.request("thread/list", {"identity": IDENTITY}))["data"] == []
