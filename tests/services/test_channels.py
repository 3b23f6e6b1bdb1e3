"""``channel/list``, ``channel/status``, ``externalChannel/*`` and the channel
adapter side (reference §3.2, §3.10; DotCraft's ExternalChannelProtocolTests,
ExternalChannelManagementHooksTests, ExternalChannelDeliveryTests)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from appserver.protocol import errors as rpc_errors
from tests.support.channels_adapter import ChannelAdapter, websocket_adapter
from tests.support.client import RpcClient
from tests.support.servers import ServerUnderTest, child_env, running_server
from tests.support.turns import wait_terminal

TELEGRAM = {"name": "telegram", "enabled": True, "transport": "websocket"}
SUBPROCESS = {
    "name": "feishu",
    "enabled": True,
    "transport": "subprocess",
    "command": "python",
    "args": ["-m", "feishu_adapter"],
    "workingDirectory": "adapters",
    "env": {"FEISHU_TOKEN": "t"},
}


async def upsert(client: RpcClient, channel: dict[str, Any]) -> dict[str, Any]:
    result = await client.request("externalChannel/upsert", {"channel": channel})
    return dict(result["channel"])


async def changed(client: RpcClient, mark: int) -> dict[str, Any]:
    return await client.notification("workspace/configChanged", start=mark)


async def wait_running(client: RpcClient, name: str, running: bool) -> None:
    """Poll channel/status (each poll is a round trip, no sleeping) until it agrees."""
    with anyio.fail_after(5):
        while True:
            status = await client.request("channel/status")
            if any(c["name"] == name and c["running"] is running for c in status["channels"]):
                return


# --- externalChannel/* --------------------------------------------------------------------


async def test_crud_round_trip_with_notifications(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        assert (await client.request("externalChannel/list"))["channels"] == []

        mark = client.mark()
        created = await upsert(client, {**TELEGRAM, "name": "  telegram "})
        assert created == TELEGRAM
        event = await changed(client, mark)
        assert event["source"] == "externalChannel/upsert"
        assert event["regions"] == ["externalChannel"]

        stored = await upsert(
            client, {**SUBPROCESS, "transport": "Subprocess", "args": [" -m ", "", "x"]}
        )
        assert stored == {**SUBPROCESS, "args": ["-m", "x"]}

        listed = (await client.request("externalChannel/list"))["channels"]
        assert [c["name"] for c in listed] == ["feishu", "telegram"]
        got = await client.request("externalChannel/get", {"name": "TELEGRAM"})
        assert got == {"channel": TELEGRAM}

        # Upsert fully replaces (case-insensitive name, new spelling kept).
        replaced = await upsert(
            client, {"name": "Telegram", "enabled": False, "transport": "websocket"}
        )
        assert replaced == {"name": "Telegram", "enabled": False, "transport": "websocket"}
        listed = (await client.request("externalChannel/list"))["channels"]
        assert [c["name"] for c in listed] == ["feishu", "Telegram"]

        mark = client.mark()
        assert await client.request("externalChannel/remove", {"name": "telegram"}) == {
            "removed": True
        }
        event = await changed(client, mark)
        assert event["source"] == "externalChannel/remove"
        assert event["regions"] == ["externalChannel"]
        missing = await client.fail("externalChannel/get", {"name": "telegram"})
        assert missing.code == rpc_errors.EXTERNAL_CHANNEL_NOT_FOUND
        assert missing.message == "External channel not found: telegram"
        again = await client.fail("externalChannel/remove", {"name": "telegram"})
        assert again.code == rpc_errors.EXTERNAL_CHANNEL_NOT_FOUND


@pytest.mark.parametrize(
    ("channel", "detail"),
    [
        ({"name": " ", "transport": "websocket"}, "'channel.name' is required."),
        ({"name": "x"}, "'channel.command' is required for subprocess transport."),
        (
            {"name": "x", "transport": "subprocess", "command": "  "},
            "'channel.command' is required",
        ),
        ({"name": "x", "transport": "carrier-pigeon"}, "'channel.transport' must be"),
        ({"name": "x", "transport": "websocket", "command": "py"}, "subprocess-only fields"),
        ({"name": "x", "transport": "websocket", "args": ["a"]}, "subprocess-only fields"),
        ({"name": "x", "transport": "websocket", "env": {"A": "1"}}, "subprocess-only fields"),
        (
            {"name": "x", "transport": "websocket", "workingDirectory": "d"},
            "subprocess-only fields",
        ),
    ],
)
async def test_invalid_configs_are_refused(
    multi_server: ServerUnderTest, channel: dict[str, Any], detail: str
) -> None:
    async with multi_server.connect() as client:
        mark = client.mark()
        failure = await client.fail("externalChannel/upsert", {"channel": channel})
        assert failure.code == rpc_errors.EXTERNAL_CHANNEL_VALIDATION_FAILED
        assert detail in failure.data["detail"]
        await client.quiet_after(mark)
        assert (await client.request("externalChannel/list"))["channels"] == []


async def test_params_errors_are_invalid_params(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        for method, params in (
            ("externalChannel/get", {}),
            ("externalChannel/get", {"name": ""}),
            ("externalChannel/remove", {"name": 3}),
            ("externalChannel/upsert", {}),
            ("externalChannel/upsert", {"channel": {"transport": "websocket"}}),
        ):
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.INVALID_PARAMS, (method, params)


async def test_native_channel_names_are_reserved(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        for name in ("cli", "CLI", "appserver"):
            failure = await client.fail(
                "externalChannel/upsert", {"channel": {"name": name, "transport": "websocket"}}
            )
            assert failure.code == rpc_errors.EXTERNAL_CHANNEL_NAME_CONFLICT
            assert "conflicts with a native channel name" in failure.data["detail"]


async def test_configs_survive_a_restart(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await upsert(client, TELEGRAM)
        await upsert(client, SUBPROCESS)
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        listed = (await client.request("externalChannel/list"))["channels"]
        assert listed == [SUBPROCESS, TELEGRAM]


# --- channel/list, channel/status ----------------------------------------------------------


async def test_channel_list_and_status(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        await upsert(client, TELEGRAM)
        await upsert(client, {**SUBPROCESS, "name": "Feishu"})
        await upsert(client, {"name": "discord", "enabled": False, "transport": "websocket"})

        channels = (await client.request("channel/list"))["channels"]
        assert sut_system_channels(multi_server) <= {c["name"] for c in channels}
        external = [c for c in channels if c["category"] == "external"]
        assert external == [
            {"name": "Feishu", "category": "external"},
            {"name": "telegram", "category": "external"},
        ]
        builtin = [c["name"] for c in channels if c["category"] == "builtin"]
        assert builtin == ["appserver", "cli"]
        order = {"builtin": 0, "system": 2, "external": 3}
        keys = [(order[c["category"]], c["name"].lower()) for c in channels]
        assert keys == sorted(keys)

        status = (await client.request("channel/status"))["channels"]
        assert status == [
            {"name": "discord", "category": "external", "enabled": False, "running": False},
            {"name": "Feishu", "category": "external", "enabled": True, "running": False},
            {"name": "telegram", "category": "external", "enabled": True, "running": False},
        ]


def sut_system_channels(sut: ServerUnderTest) -> set[str]:
    """System channels the server under test should list (cron, heartbeat and
    automations when served, or waiting for their first call)."""
    assert sut.app is not None
    wanted = {
        "cron": "cron/list",
        "heartbeat": "heartbeat/trigger",
        "automations": "automation/task/list",
    }
    return {name for name, method in wanted.items() if sut.app.router.serves(method)}


async def test_capabilities(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        caps = (await client.initialize())["capabilities"]
        assert caps["externalChannelManagement"] is True
        assert caps["channelStatus"] is True


# --- adapters ----------------------------------------------------------------------------------


async def test_adapter_round_trip_over_websocket(workspace: Path) -> None:
    async with running_server("websocket", workspace) as sut, sut.connect("admin") as admin:
        await upsert(admin, TELEGRAM)
        assert sut.url is not None
        async with websocket_adapter(sut.url, "Telegram") as adapter:
            await adapter.initialize()
            await wait_running(admin, "telegram", True)

            mark = adapter.client.mark()
            turn = await adapter.handle_message("u-42", "Alice", "c-7", "hello")
            assert turn["originChannel"] == "telegram"
            terminal = await wait_terminal(adapter.client, turn["id"], start=mark)
            assert terminal["method"] == "turn/completed"

            delivery = await adapter.next_delivery()
            thread_id = adapter.threads[("u-42", "c-7")]
            assert delivery.target == "c-7"
            assert delivery.message == {"kind": "text", "text": "You said: hello"}
            assert delivery.metadata == {
                "threadId": thread_id,
                "turnId": turn["id"],
                "channelName": "telegram",
                "channelContext": "chat:c-7",
                "senderId": "u-42",
                "groupId": "c-7",
            }

            # The stored turn is attributed to the channel and the sender.
            read = await admin.request("thread/read", {"threadId": thread_id, "includeTurns": True})
            thread = read["thread"]
            # The thread keeps the identity the adapter gave; its turns take the
            # configured spelling of the channel.
            assert thread["originChannel"] == "Telegram" and thread["userId"] == "u-42"
            (stored,) = thread["turns"]
            assert stored["originChannel"] == "telegram"
            assert stored["initiator"] == {
                "channelName": "telegram",
                "userId": "u-42",
                "userName": "Alice",
                "groupId": "c-7",
                "channelContext": "chat:c-7",
            }
            user_message = next(i for i in stored["items"] if i["type"] == "userMessage")
            payload = user_message["payload"]
            assert payload["channelName"] == "telegram"
            assert payload["channelContext"] == "chat:c-7"
            assert payload["senderId"] == "u-42" and payload["senderName"] == "Alice"
            assert payload["groupId"] == "c-7"

            # A second message from the same chat reuses the thread (thread/list).
            await adapter.handle_message("u-42", "Alice", "c-7", "again")
            second = await adapter.next_delivery(2)
            assert second.message["text"] == "You said: again"
            assert len(adapter.threads) == 1

        await wait_running(admin, "telegram", False)


async def test_adapter_without_a_sender_is_attributed_to_its_client(
    multi_server: ServerUnderTest,
) -> None:
    async with multi_server.connect("admin") as admin:
        await upsert(admin, TELEGRAM)
        async with multi_server.connect("bot", initialize=False) as client:
            adapter = ChannelAdapter(client, "telegram")
            await adapter.initialize()
            thread = await client.request(
                "thread/start", {"identity": {"channelName": "cli", "userId": "local"}}
            )
            thread_id = thread["thread"]["id"]
            mark = client.mark()
            result = await client.request(
                "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "hi"}]}
            )
            turn = result["turn"]
            # The adapter's turn belongs to its channel even on a cli thread.
            assert turn["originChannel"] == "telegram"
            assert turn["initiator"] == {"channelName": "telegram", "userId": "bot"}
            await wait_terminal(client, turn["id"], start=mark)
            delivery = await adapter.next_delivery()
            assert delivery.target == "bot"
            assert delivery.metadata["senderId"] == "bot"


async def test_ordinary_clients_get_no_channel_delivery(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        thread = await client.request(
            "thread/start", {"identity": {"channelName": "cli", "userId": "local"}}
        )
        thread_id = thread["thread"]["id"]
        mark = client.mark()
        result = await client.request(
            "turn/start",
            {
                "threadId": thread_id,
                "input": [{"type": "text", "text": "hello"}],
                "sender": {"senderId": "s1", "senderName": "Sam"},
            },
        )
        turn = result["turn"]
        assert turn["originChannel"] == "cli"
        terminal = await wait_terminal(client, turn["id"], start=mark)
        items = terminal["params"]["turn"]["items"]
        assert "channelName" not in items[0]["payload"]
        await client.settle()
        assert not [m for m in client.messages[mark:] if m.get("method") == "ext/channel/send"]


async def test_adapter_without_structured_delivery_gets_no_send(
    multi_server: ServerUnderTest,
) -> None:
    async with multi_server.connect("admin") as admin:
        await upsert(admin, TELEGRAM)
        async with multi_server.connect("bot", initialize=False) as client:
            adapter = ChannelAdapter(client, "telegram", structured_delivery=False)
            await adapter.initialize()
            mark = client.mark()
            turn = await adapter.handle_message("u1", "Una", "c1", "hello")
            terminal = await wait_terminal(client, turn["id"], start=mark)
            assert terminal["method"] == "turn/completed"
            await client.settle()
            assert adapter.deliveries == []
            assert not [m for m in client.messages[mark:] if m.get("method") == "ext/channel/send"]


@pytest.mark.parametrize(
    "answer",
    [
        {"delivered": False, "errorCode": "ChatNotFound", "errorMessage": "gone"},
        {"unexpected": "shape", "delivered": "maybe"},
    ],
)
async def test_failed_delivery_harms_nothing(
    multi_server: ServerUnderTest, answer: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with multi_server.connect("admin") as admin:
        await upsert(admin, TELEGRAM)
        async with multi_server.connect("bot", initialize=False) as client:
            adapter = ChannelAdapter(client, "telegram", answer=answer)
            await adapter.initialize()
            for count, text in enumerate(("one", "two"), start=1):
                mark = client.mark()
                turn = await adapter.handle_message("u1", "Una", "c1", text)
                terminal = await wait_terminal(client, turn["id"], start=mark)
                assert terminal["method"] == "turn/completed"
                delivery = await adapter.next_delivery(count)
                assert delivery.message["text"] == f"You said: {text}"
            await client.settle()
            assert not client.closed
    assert "telegram" in caplog.text


async def test_delivery_error_response_is_survived(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("admin") as admin:
        await upsert(admin, TELEGRAM)
        async with multi_server.connect("bot", initialize=False) as client:
            adapter = ChannelAdapter(client, "telegram")
            client.on_server_request = lambda method, params: None  # answered by hand
            await adapter.initialize()
            mark = client.mark()
            turn = await adapter.handle_message("u1", "Una", "c1", "hello")
            await wait_terminal(client, turn["id"], start=mark)
            request = await client.wait(
                lambda m: m.get("method") == "ext/channel/send" and "id" in m, start=mark
            )
            await client.send(
                {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "no"}}
            )
            await client.settle()
            # The thread is free again: a new turn runs and is delivered as well.
            mark = client.mark()
            turn = await adapter.handle_message("u1", "Una", "c1", "next")
            terminal = await wait_terminal(client, turn["id"], start=mark)
            assert terminal["method"] == "turn/completed"
            request = await client.wait(
                lambda m: m.get("method") == "ext/channel/send" and "id" in m, start=mark
            )
            assert request["params"]["message"]["text"] == "You said: next"


# --- rejection ---------------------------------------------------------------------------------


async def wait_closed(client: RpcClient) -> None:
    """Wait until the server closed the connection."""
    with pytest.raises(ConnectionError):
        await client.wait(lambda m: False, timeout=5)


@pytest.mark.parametrize(
    ("setup", "adapter_name", "message"),
    [
        (None, "nobody", "Channel 'nobody' is not registered in server configuration."),
        (
            {"name": "off", "enabled": False, "transport": "websocket"},
            "off",
            "Channel 'off' is disabled in server configuration.",
        ),
        (
            SUBPROCESS,
            "feishu",
            "Channel 'feishu' is subprocess-only; WebSocket adapter attach is not supported.",
        ),
    ],
)
async def test_unregistered_adapter_is_rejected_and_closed(
    workspace: Path, setup: dict[str, Any] | None, adapter_name: str, message: str
) -> None:
    async with running_server("websocket", workspace) as sut, sut.connect("admin") as admin:
        if setup is not None:
            await upsert(admin, setup)
        assert sut.url is not None
        async with connect(sut.url) as ws:
            await ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "clientInfo": {"name": "intruder", "version": "1"},
                            "capabilities": {"channelAdapter": {"channelName": adapter_name}},
                        },
                    }
                )
            )
            frames = []
            with pytest.raises(ConnectionClosed):
                while True:
                    frames.append(json.loads(await ws.recv()))
            assert ws.close_code == 1008
        response, event = frames
        assert response["id"] == 1 and "serverInfo" in response["result"]
        assert event == {
            "jsonrpc": "2.0",
            "method": "system/event",
            "params": {"kind": "channelRejected", "channelName": adapter_name, "message": message},
        }
        status = (await admin.request("channel/status"))["channels"]
        assert all(c["running"] is False for c in status)


async def test_adapter_without_a_channel_name_is_rejected(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("x", initialize=False) as client:
        await client.request(
            "initialize",
            {
                "clientInfo": {"name": "x", "version": "1"},
                "capabilities": {"channelAdapter": {"deliveryCapabilities": {}}},
            },
        )
        event = await client.notification("system/event")
        assert event["kind"] == "channelRejected"
        assert event["message"] == "'channelAdapter.channelName' is required."
        await wait_closed(client)


async def test_removing_or_disabling_a_channel_disconnects_its_adapter(
    multi_server: ServerUnderTest,
) -> None:
    async with multi_server.connect("admin") as admin:
        for change in ("remove", "disable"):
            await upsert(admin, TELEGRAM)
            async with multi_server.connect("bot", initialize=False) as client:
                adapter = ChannelAdapter(client, "telegram")
                await adapter.initialize()
                await wait_running(admin, "telegram", True)
                mark = client.mark()
                if change == "remove":
                    await admin.request("externalChannel/remove", {"name": "telegram"})
                    expected = "Channel 'telegram' was removed."
                else:
                    await upsert(admin, {**TELEGRAM, "enabled": False})
                    expected = "Channel 'telegram' was disabled."
                event = await client.notification("system/event", start=mark)
                assert event == {
                    "kind": "channelRejected",
                    "channelName": "telegram",
                    "message": expected,
                }
                await wait_closed(client)
            if change == "disable":
                await wait_running(admin, "telegram", False)


async def test_adapter_as_a_separate_process(workspace: Path) -> None:
    async with running_server("websocket", workspace) as sut, sut.connect("admin") as admin:
        await upsert(admin, TELEGRAM)
        assert sut.url is not None
        command = [
            sys.executable,
            "-m",
            "tests.support.channels_adapter",
            sut.url,
            "telegram",
            "u-9",
            "c-9",
            "hello from afar",
        ]
        with anyio.fail_after(20):
            done = await anyio.run_process(command, env=child_env(), cwd=Path(__file__).parents[2])
        delivery = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert delivery["target"] == "c-9"
        assert delivery["message"] == {"kind": "text", "text": "You said: hello from afar"}
        assert delivery["metadata"]["channelName"] == "telegram"
        assert delivery["metadata"]["senderId"] == "u-9"
