"""Channel tools end to end: the ``channelTools`` an external channel adapter
registers in ``initialize`` are offered to the model on its channel's turns, a
call becomes ``ext/channel/toolCall`` to the adapter and a ``pluginFunctionCall``
item, and no call ever hangs the turn (timeout, a vanished adapter); an adapter
that attaches while a call waits is asked it again (docs/channels.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.providers.base import ModelRequest
from appserver.runtime.turns import EngineConfig
from tests.services.test_channels import TELEGRAM, upsert, wait_running
from tests.support.channels_adapter import ChannelAdapter, websocket_adapter
from tests.support.client import RpcClient
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import wait_terminal

TOOLS: list[dict[str, Any]] = [
    {
        "name": "SendSticker",
        "description": "Send a sticker to the chat.",
        "inputSchema": {"type": "object", "properties": {"sticker": {"type": "string"}}},
        "display": {"title": "Sticker"},
    },
    {
        "name": "PinMessage",
        "description": "Pin a message in the chat.",
        "inputSchema": {"type": "object"},
        "requiresChatContext": True,
        "approval": {"kind": "remoteResource", "targetArgument": "messageId"},
    },
    {"description": "no name: dropped"},
]


def sticker_sent(params: dict[str, Any]) -> dict[str, Any]:
    sticker = params["arguments"].get("sticker")
    return {"success": True, "contentItems": [{"type": "text", "text": f"sent {sticker}"}]}


def _plugin_items(terminal: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in terminal["params"]["turn"]["items"] if i["type"] == "pluginFunctionCall"]


def _final_text(terminal: dict[str, Any]) -> str:
    texts = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "agentMessage"]
    return str(texts[-1]["payload"]["text"])


@pytest.mark.parametrize("kind", ["websocket", "memory"])
async def test_the_model_calls_a_channel_tool(kind: str, workspace: Path) -> None:
    with anyio.fail_after(15):
        async with running_server(kind, workspace) as sut, sut.connect("admin") as admin:
            await upsert(admin, TELEGRAM)
            async with _adapter(sut, tools=TOOLS, tool_answer=sticker_sent) as adapter:
                await adapter.initialize()
                await wait_running(admin, "telegram", True)
                mark = adapter.client.mark()
                turn = await adapter.handle_message(
                    "u-42", "Alice", "c-7", '?tool SendSticker {"sticker": "cat"}'
                )
                terminal = await wait_terminal(adapter.client, turn["id"], start=mark)
                assert terminal["method"] == "turn/completed"
                thread_id = adapter.threads[("u-42", "c-7")]
                (call,) = adapter.tool_calls
                assert call == {
                    "threadId": thread_id,
                    "turnId": turn["id"],
                    "callId": call["callId"],
                    "tool": "SendSticker",
                    "arguments": {"sticker": "cat"},
                    "context": {
                        "channelName": "telegram",
                        "channelContext": "chat:c-7",
                        "senderId": "u-42",
                        "groupId": "c-7",
                    },
                }
                (item,) = _plugin_items(terminal)
                assert item["payload"] == {
                    "pluginId": "channel:telegram",
                    "functionName": "SendSticker",
                    "callId": call["callId"],
                    "arguments": {"sticker": "cat"},
                    "success": True,
                    "contentItems": [{"type": "text", "text": "sent cat"}],
                }
                kinds = {i["type"] for i in terminal["params"]["turn"]["items"]}
                assert "toolCall" not in kinds and "toolResult" not in kinds
                assert "sent cat" in _final_text(terminal)
                # The reply still goes out through ext/channel/send.
                delivery = await adapter.next_delivery()
                assert "sent cat" in str(delivery.message["text"])

                # Later turns replay the call and its answer to the model.
                mark = adapter.client.mark()
                turn = await adapter.handle_message("u-42", "Alice", "c-7", "thanks")
                terminal = await wait_terminal(adapter.client, turn["id"], start=mark)
                assert terminal["method"] == "turn/completed"


async def test_channel_tools_are_offered_on_the_channels_threads_only(workspace: Path) -> None:
    seen: dict[str, list[str]] = {}

    class Recorder:
        default_model = "rec"

        async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
            from appserver.providers.base import Stop, TextDelta

            key = str(request.messages[-1].content)
            seen[key] = [spec.name for spec in request.tools]
            yield TextDelta("ok")
            yield Stop("end_turn")

    with anyio.fail_after(15):
        async with (
            running_server("websocket", workspace, provider=Recorder()) as sut,
            sut.connect("admin") as admin,
        ):
            await upsert(admin, TELEGRAM)
            async with _adapter(sut, tools=TOOLS) as adapter:
                await adapter.initialize()
                mark = adapter.client.mark()
                turn = await adapter.handle_message("u1", "Una", "c1", "in the chat")
                await wait_terminal(adapter.client, turn["id"], start=mark)
                # A thread of the channel without a chat context: no PinMessage.
                started = await admin.request(
                    "thread/start", {"identity": {"channelName": "telegram", "userId": "u2"}}
                )
                await _run(admin, started["thread"]["id"], "no chat")
                cli = await admin.request(
                    "thread/start", {"identity": {"channelName": "cli", "userId": "local"}}
                )
                await _run(admin, cli["thread"]["id"], "on the cli")
    assert {"SendSticker", "PinMessage"} <= set(seen["in the chat"])
    assert "SendSticker" in seen["no chat"] and "PinMessage" not in seen["no chat"]
    assert "SendSticker" not in seen["on the cli"] and "PinMessage" not in seen["on the cli"]


async def _run(client: RpcClient, thread_id: str, text: str) -> dict[str, Any]:
    mark = client.mark()
    result = await client.request(
        "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
    )
    return await wait_terminal(client, result["turn"]["id"], start=mark)


def _adapter(sut: ServerUnderTest, **options: Any) -> Any:
    """A channel adapter for ``telegram`` over the server's transport."""
    if sut.url is not None:
        return websocket_adapter(sut.url, "telegram", **options)
    return _memory_adapter(sut, **options)


@asynccontextmanager
async def _memory_adapter(sut: ServerUnderTest, **options: Any) -> AsyncIterator[ChannelAdapter]:
    async with sut.connect("telegram-adapter", initialize=False) as client:
        yield ChannelAdapter(client, "telegram", **options)


async def test_no_answer_in_time_fails_the_call(workspace: Path) -> None:
    short = EngineConfig(approval_timeout=0.3, reconnect_grace=0.3)
    with anyio.fail_after(15):
        async with (
            running_server("websocket", workspace, engine=short) as sut,
            sut.connect("admin") as admin,
        ):
            await upsert(admin, TELEGRAM)
            async with _adapter(sut, tools=TOOLS) as adapter:  # never answers
                await adapter.initialize()
                mark = adapter.client.mark()
                turn = await adapter.handle_message("u1", "Una", "c1", "?tool SendSticker {}")
                terminal = await wait_terminal(adapter.client, turn["id"], start=mark)
                assert terminal["method"] == "turn/completed"
                assert len(adapter.tool_calls) == 1
                (item,) = _plugin_items(terminal)
                assert item["payload"]["success"] is False
                assert item["payload"]["errorCode"] == "toolCallTimeout"


async def test_a_vanished_adapter_fails_the_call(workspace: Path) -> None:
    grace = EngineConfig(approval_timeout=10, reconnect_grace=0.3)
    with anyio.fail_after(15):
        async with (
            running_server("websocket", workspace, engine=grace) as sut,
            sut.connect("admin") as admin,
        ):
            await upsert(admin, TELEGRAM)
            async with _adapter(sut, tools=TOOLS) as adapter:  # never answers
                await adapter.initialize()
                thread_id = await adapter.thread_for("u1", "c1")
                await admin.request("thread/subscribe", {"threadId": thread_id})
                turn = await adapter.handle_message("u1", "Una", "c1", "?tool SendSticker {}")
                await adapter.wait_tool_call()
            # The adapter is gone; the admin (subscribed) is never asked.
            terminal = await wait_terminal(admin, turn["id"])
            assert terminal["method"] == "turn/completed"
            (item,) = _plugin_items(terminal)
            assert item["payload"]["errorCode"] == "toolCallClientGone"
            assert not [m for m in admin.messages if m.get("method") == "ext/channel/toolCall"]


async def test_a_reconnecting_adapter_is_asked_again(workspace: Path) -> None:
    grace = EngineConfig(approval_timeout=10, reconnect_grace=8)
    with anyio.fail_after(15):
        async with (
            running_server("websocket", workspace, engine=grace) as sut,
            sut.connect("admin") as admin,
        ):
            await upsert(admin, TELEGRAM)
            async with _adapter(sut, tools=TOOLS) as first:  # never answers
                await first.initialize()
                thread_id = await first.thread_for("u1", "c1")
                await admin.request("thread/subscribe", {"threadId": thread_id})
                turn = await first.handle_message("u1", "Una", "c1", '?tool SendSticker {"a": 1}')
                request = await first.wait_tool_call()
            async with _adapter(sut, tools=TOOLS, tool_answer=sticker_sent) as second:
                await second.initialize()
                again = await second.wait_tool_call()
                assert again == request
                terminal = await wait_terminal(admin, turn["id"])
                assert terminal["method"] == "turn/completed"
                (item,) = _plugin_items(terminal)
                assert item["payload"]["success"] is True


def test_a_channel_tools_approval_hint_becomes_its_approval(workspace: Path) -> None:
    from appserver.protocol.channels import ChannelAdapterCapability
    from appserver.runtime.turns.client_tools import client_tool_need
    from appserver.services.channels.adapters import AdapterHub

    capability = ChannelAdapterCapability.model_validate(
        {"channelName": "telegram", "channelTools": TOOLS}
    )
    tools = AdapterHub._declared_tools("telegram", capability)
    pin, _ = tools["PinMessage"]
    sticker, _ = tools["SendSticker"]
    assert client_tool_need(sticker, {"sticker": "cat"}, workspace) is None
    need = client_tool_need(pin, {"messageId": 42}, workspace)
    assert need is not None
    assert (need.kind, need.operation, need.target) == ("remoteResource", "PinMessage", "42")
    assert need.outside_workspace is False
    from appserver.runtime.turns.client_tools import ClientTool

    hint = {"kind": "file", "targetArgument": "path", "operationArgument": "mode"}
    save = ClientTool(None, "save", "", {}, approval=hint)
    inside = client_tool_need(save, {"path": "notes/a.txt", "mode": "write"}, workspace)
    outside = client_tool_need(save, {"path": "/etc/passwd", "mode": "write"}, workspace)
    assert inside is not None and outside is not None
    assert (inside.operation, inside.outside_workspace) == ("write", False)
    assert (outside.target, outside.outside_workspace) == ("/etc/passwd", True)
    # What cannot be judged counts as outside (fail closed), and so does .craft/.
    for target in ["/x\0y", ["/etc/passwd"], {"p": "/etc"}, "~/.bashrc", ".craft/config.json"]:
        need = client_tool_need(save, {"path": target, "mode": "write"}, workspace)
        assert need is not None and need.outside_workspace is True, target
    (workspace / "loop").symlink_to("loop")
    looped = client_tool_need(save, {"path": "loop/x", "mode": "write"}, workspace)
    assert looped is not None  # resolving a symlink loop does not fail the turn
    # A shell tool's target is judged as a directory only when it is one word.
    run = ClientTool(None, "run", "", {}, approval={"kind": "shell", "targetArgument": "cmd"})
    for command, outside in [("cat /etc/passwd", True), ("cd .. && ls", True), ("scripts", False)]:
        judged = client_tool_need(run, {"cmd": command}, workspace)
        assert judged is not None and judged.outside_workspace is outside, command
    missing = client_tool_need(run, {}, workspace)
    assert missing is not None and missing.outside_workspace is True
