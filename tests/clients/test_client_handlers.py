"""The Python client's handler API for server->client requests beyond approvals
and ``item/tool/call``: ``on_read_text_file`` / ``on_write_text_file`` (the
IDE's buffers, ``ext/acp/fs/*``, docs/tools.md), ``on_terminal`` (the IDE's
terminals, ``ext/acp/terminal/*``) and ``on_channel_tool_call``
(``ext/channel/toolCall``, docs/channels.md), against a real server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from appserver_client import AppServerClient
from appserver_client.types import (
    ChannelToolCallParams,
    EditorTerminalCreateParams,
    EditorTerminalOutputResult,
    EditorTerminalParams,
    EditorTerminalWaitParams,
    ReadTextFileParams,
    WriteTextFileParams,
)
from websockets.asyncio.server import ServerConnection

from tests.clients.test_client_api import new_thread, open_client, scripted_peer
from tests.services.test_channels import TELEGRAM, upsert, wait_running
from tests.support.servers import running_server


def _tool_result(items: list[Any]) -> dict[str, Any]:
    (item,) = [i for i in items if i["type"] == "toolResult"]
    return dict(item["payload"])


def _call(tool: str, **arguments: Any) -> str:
    return f"?tool {tool} {json.dumps(arguments)}"


class Buffers:
    """An editor's unsaved buffers (absolute path -> text), served by handlers."""

    def __init__(self, buffers: dict[str, str]) -> None:
        self.buffers = buffers
        self.reads: list[ReadTextFileParams] = []
        self.writes: list[WriteTextFileParams] = []

    def read(self, params: ReadTextFileParams) -> str:  # sync, returning the text
        self.reads.append(params)
        return self.buffers[params["path"]]

    async def write(self, params: WriteTextFileParams) -> None:  # async, returning nothing
        self.writes.append(params)
        self.buffers[params["path"]] = params["content"]


@pytest.mark.parametrize("kind", ["stdio", "websocket"])
async def test_editor_handlers_serve_the_file_tools_from_buffers(
    kind: str, workspace: Path
) -> None:
    (workspace / "x.txt").write_text("on disk\n")
    path = str((workspace / "x.txt").resolve())
    editor = Buffers({path: "in the buffer\n"})
    with anyio.fail_after(30):
        async with open_client(
            kind,
            workspace,
            read_text_file_handler=editor.read,
            write_text_file_handler=editor.write,
            approval_handler=lambda params: "accept",
        ) as client:
            # Advertised automatically: the client built its own capabilities.
            assert client.initialize_capabilities()["acpExtensions"] == {
                "fsReadTextFile": True,
                "fsWriteTextFile": True,
            }
            thread_id = await new_thread(client)

            outcome = await client.run_turn(thread_id, _call("read_file", path="x.txt"))
            assert outcome.ok
            result = _tool_result(outcome.items)
            assert result["success"] is True and result["result"] == "in the buffer\n"
            assert editor.reads == [{"threadId": thread_id, "path": path}]

            outcome = await client.run_turn(
                thread_id, _call("write_file", path="x.txt", content="written\n")
            )
            assert outcome.ok and _tool_result(outcome.items)["success"] is True
            assert editor.writes == [{"threadId": thread_id, "path": path, "content": "written\n"}]
            assert editor.buffers[path] == "written\n"
            assert (workspace / "x.txt").read_text() == "on disk\n"

            # A handler that fails answers a JSON-RPC error: the tool call fails,
            # the turn goes on.
            def broken(params: ReadTextFileParams) -> Any:
                return {"text": "not content"}

            client.on_read_text_file(broken)
            outcome = await client.run_turn(thread_id, _call("read_file", path="x.txt"))
            assert outcome.ok
            result = _tool_result(outcome.items)
            assert result["success"] is False
            assert "the editor refused" in result["result"]


class FakeTerminals:
    """An IDE's terminals that "run" a command by echoing it (a sync and async mix)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def create(self, params: EditorTerminalCreateParams) -> str:
        self.calls.append(("create", params))
        return "t1"

    def wait_for_exit(self, params: EditorTerminalWaitParams) -> EditorTerminalOutputResult:
        self.calls.append(("wait_for_exit", params))
        return {"output": "ran: " + str(self.calls[0][1]["command"]), "exitCode": 0}

    def get_output(self, params: EditorTerminalParams) -> EditorTerminalOutputResult:
        raise AssertionError("not asked: the wait answered the output")

    def kill(self, params: EditorTerminalParams) -> None:
        raise AssertionError("not asked: the command exited")

    async def release(self, params: EditorTerminalParams) -> None:
        self.calls.append(("release", params))


@pytest.mark.parametrize("kind", ["stdio", "websocket"])
async def test_terminal_handler_runs_the_shell_in_the_ide(kind: str, workspace: Path) -> None:
    terminals = FakeTerminals()
    with anyio.fail_after(30):
        async with open_client(
            kind, workspace, terminal_handler=terminals, approval_handler=lambda p: "accept"
        ) as client:
            assert client.initialize_capabilities()["acpExtensions"] == {"terminalCreate": True}
            thread_id = await new_thread(client)
            outcome = await client.run_turn(thread_id, _call("shell", command="make build"))
            assert outcome.ok
            result = _tool_result(outcome.items)
            assert result == {**result, "success": True, "result": "exit code: 0\nran: make build"}
            assert [name for name, _ in terminals.calls] == ["create", "wait_for_exit", "release"]
            assert terminals.calls[2][1] == {"threadId": thread_id, "terminalId": "t1"}

            client.on_terminal(None)  # no handler: -32601, the shell call fails
            outcome = await client.run_turn(thread_id, _call("shell", command="make build"))
            assert outcome.ok
            assert (
                "the editor refused ext/acp/terminal/create"
                in (_tool_result(outcome.items)["result"])
            )


async def test_editor_capabilities_given_by_the_user_are_sent_as_is(workspace: Path) -> None:
    """With ``acpExtensions`` in ``capabilities`` the client adds nothing; a
    request it has no handler for is answered -32601 (the tool call fails)."""
    (workspace / "x.txt").write_text("on disk\n")
    caps: dict[str, Any] = {"acpExtensions": {"fsReadTextFile": True}}
    with anyio.fail_after(30):
        async with open_client(
            "websocket", workspace, capabilities=caps, write_text_file_handler=lambda p: None
        ) as client:
            assert client.initialize_capabilities() == caps
            thread_id = await new_thread(client)
            outcome = await client.run_turn(thread_id, _call("read_file", path="x.txt"))
            assert outcome.ok
            result = _tool_result(outcome.items)
            assert result["success"] is False
            assert "the editor refused" in result["result"] and "-32601" in result["result"]
            # A raw handler answers when no typed handler is set.
            client.set_request_handler("ext/acp/fs/readTextFile", lambda p: {"content": "raw\n"})
            outcome = await client.run_turn(thread_id, _call("read_file", path="x.txt"))
            assert _tool_result(outcome.items)["result"] == "raw\n"


async def test_without_editor_handlers_nothing_is_advertised(workspace: Path) -> None:
    (workspace / "x.txt").write_text("on disk\n")
    with anyio.fail_after(30):
        async with open_client("websocket", workspace) as client:
            assert "acpExtensions" not in client.initialize_capabilities()
            thread_id = await new_thread(client)
            outcome = await client.run_turn(thread_id, _call("read_file", path="x.txt"))
            assert _tool_result(outcome.items)["result"] == "on disk\n"


STICKER = {
    "name": "SendSticker",
    "description": "Send a sticker to the chat.",
    "inputSchema": {"type": "object", "properties": {"sticker": {"type": "string"}}},
}


async def test_channel_adapter_on_channel_tool_call(workspace: Path) -> None:
    """An adapter written with the client: ``channelTools`` in its capabilities,
    ``on_channel_tool_call`` runs them (docs/channels.md)."""
    seen: list[ChannelToolCallParams] = []

    async def run(params: ChannelToolCallParams) -> dict[str, Any]:
        seen.append(params)
        return {"success": True, "contentItems": [{"type": "text", "text": "sticker sent"}]}

    adapter_caps = {"channelAdapter": {"channelName": "telegram", "channelTools": [STICKER]}}
    with anyio.fail_after(30):
        async with running_server("websocket", workspace) as sut, sut.connect("admin") as admin:
            assert sut.url is not None
            await upsert(admin, TELEGRAM)
            async with AppServerClient.connect(
                sut.url, capabilities=adapter_caps, channel_tool_call_handler=run
            ) as adapter:
                await wait_running(admin, "telegram", True)
                identity: Any = {
                    "channelName": "telegram",
                    "userId": "u-42",
                    "channelContext": "chat:c-7",
                }
                thread_id = (await adapter.thread_start(identity=identity))["thread"]["id"]
                sender: Any = {"senderId": "u-42", "senderName": "Alice", "groupId": "c-7"}
                outcome = await adapter.run_turn(
                    thread_id, _call("SendSticker", sticker="cat"), sender=sender
                )
                assert outcome.ok
                (params,) = seen
                assert params["tool"] == "SendSticker" and params["arguments"] == {"sticker": "cat"}
                assert params["context"]["channelName"] == "telegram"
                (item,) = [i for i in outcome.items if i["type"] == "pluginFunctionCall"]
                assert item["payload"]["success"] is True

                # No handler: the call fails ("no handler"), the turn completes.
                adapter.on_channel_tool_call(None)
                outcome = await adapter.run_turn(
                    thread_id, _call("SendSticker", sticker="dog"), sender=sender
                )
                assert outcome.ok
                (item,) = [i for i in outcome.items if i["type"] == "pluginFunctionCall"]
                assert item["payload"]["success"] is False
                assert item["payload"]["errorCode"] == "noHandler"


async def test_handler_dispatch_rules_with_a_scripted_server() -> None:
    """Typed handlers win over raw ones; without a typed one the raw handler
    answers; failures become results (tools) or JSON-RPC errors (files)."""
    answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    requests: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()

    async def script(ws: ServerConnection) -> None:
        next_id = 100
        while (request := await requests.get()) is not None:
            method, params = request
            next_id += 1
            await ws.send(
                json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
            )
            await answers.put(json.loads(await ws.recv()))
        await ws.wait_closed()

    async def ask(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        await requests.put((method, params or {}))
        answer = await asyncio.wait_for(answers.get(), 5)
        answer.pop("id")
        answer.pop("jsonrpc")
        return answer

    tool = "ext/channel/toolCall"
    read = "ext/acp/fs/readTextFile"
    write = "ext/acp/fs/writeTextFile"
    async with scripted_peer(script) as url, AppServerClient.connect(url) as client:
        no_handler = {"success": False, "errorCode": "noHandler", "errorMessage": "no handler"}
        assert await ask(tool) == {"result": no_handler}
        assert (await ask(read))["error"]["code"] == -32601
        assert (await ask(write))["error"]["code"] == -32601

        client.set_request_handler(tool, lambda p: {"raw": True})
        client.set_request_handler(read, lambda p: {"content": "raw"})
        assert await ask(tool) == {"result": {"raw": True}}
        assert await ask(read) == {"result": {"content": "raw"}}

        client.on_channel_tool_call(lambda p: {"success": True, "structuredResult": p["tool"]})
        client.on_read_text_file(lambda p: {"content": p["path"], "extra": 1})
        client.on_write_text_file(lambda p: None)
        assert await ask(tool, {"tool": "t"}) == {
            "result": {"success": True, "structuredResult": "t"}
        }
        assert await ask(read, {"path": "/a"}) == {"result": {"content": "/a", "extra": 1}}
        assert await ask(write, {"path": "/a", "content": ""}) == {"result": {}}

        def fail(params: Any) -> Any:
            raise RuntimeError("boom")

        client.on_channel_tool_call(fail)
        client.on_read_text_file(fail)
        client.on_write_text_file(fail)
        failed = (await ask(tool))["result"]
        assert failed["errorCode"] == "handlerFailed" and failed["errorMessage"] == "boom"
        for method in (read, write):
            error = (await ask(method))["error"]
            assert error["code"] == -32603 and error["data"] == {"detail": "boom"}

        client.on_read_text_file(lambda p: 42)
        assert (await ask(read))["error"]["code"] == -32603

        client.on_channel_tool_call(None)
        client.on_read_text_file(None)
        assert await ask(tool) == {"result": {"raw": True}}
        assert await ask(read) == {"result": {"content": "raw"}}
        await requests.put(None)
