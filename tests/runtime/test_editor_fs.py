"""The IDE's file system (DotCraft's ``acpExtensions``): when the client bound to
a thread advertised ``fsReadTextFile`` / ``fsWriteTextFile``, the file tools
read and write through ``ext/acp/fs/readTextFile`` / ``writeTextFile`` (the
editor's unsaved buffers, not the disk); the sandbox and approvals come first;
a failure fails the tool call, not the turn (docs/tools.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.runtime.turns import EngineConfig
from tests.support.client import RpcClient
from tests.support.helpers import start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import run_turn, start_turn, wait_terminal

FS = {"acpExtensions": {"fsReadTextFile": True, "fsWriteTextFile": True}}
AUTO = {"approvalPolicy": "autoApprove"}


class Editor:
    """An IDE with in-memory buffers (path -> text) that differ from the disk.

    ``answering=False``: never answers ``ext/acp/fs/*``; ``approve`` answers approvals.
    """

    def __init__(
        self, client: RpcClient, buffers: dict[str, str], *, answering: bool = True
    ) -> None:
        self.client = client
        self.buffers = buffers
        self.answering = answering
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.approvals: list[dict[str, Any]] = []
        self.approve = "accept"
        client.on_server_request = self._handle

    def _handle(self, method: str, params: Any) -> Any:
        if method == "item/approval/request":
            self.approvals.append(params)
            return {"decision": self.approve}
        self.requests.append((method, params))
        if not self.answering:
            return None
        if method == "ext/acp/fs/readTextFile":
            lines = self.buffers[params["path"]].splitlines(keepends=True)
            start = (params.get("line") or 1) - 1
            end = start + params["limit"] if params.get("limit") else None
            return {"content": "".join(lines[start:end])}
        if method == "ext/acp/fs/writeTextFile":
            self.buffers[params["path"]] = params["content"]
            return {}
        raise AssertionError(method)


def _result(terminal: dict[str, Any]) -> dict[str, Any]:
    (item,) = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "toolResult"]
    return dict(item["payload"])


def _call(tool: str, **arguments: Any) -> str:
    return f"?tool {tool} {json.dumps(arguments)}"


@pytest.fixture(params=["stdio", "websocket"])
async def ide_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    async with running_server(request.param, workspace) as sut:
        yield sut


async def test_the_file_tools_use_the_editors_buffers(
    ide_server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    path = str((workspace / "notes.txt").resolve())
    with anyio.fail_after(20):
        async with ide_server.connect("ide", capabilities=FS) as client:
            editor = Editor(client, {path: "unsaved one\nunsaved two\nunsaved three\n"})
            thread_id = (await start_thread(client, config=AUTO))["id"]

            _, terminal = await run_turn(client, thread_id, _call("read_file", path="notes.txt"))
            assert terminal["method"] == "turn/completed"
            result = _result(terminal)
            assert result["success"] is True
            assert result["result"] == "unsaved one\nunsaved two\nunsaved three\n"
            assert editor.requests[-1] == (
                "ext/acp/fs/readTextFile",
                {"threadId": thread_id, "path": path},
            )

            _, terminal = await run_turn(
                client, thread_id, _call("read_file", path="notes.txt", offset=2, limit=1)
            )
            assert _result(terminal)["result"] == "unsaved two\n"
            assert editor.requests[-1][1] == {
                "threadId": thread_id,
                "path": path,
                "line": 2,
                "offset": 2,
                "limit": 1,
            }

            _, terminal = await run_turn(
                client,
                thread_id,
                _call("edit_file", path="notes.txt", old_string="two", new_string="2"),
            )
            assert _result(terminal)["success"] is True
            assert editor.buffers[path] == "unsaved one\nunsaved 2\nunsaved three\n"

            _, terminal = await run_turn(
                client, thread_id, _call("write_file", path="notes.txt", content="replaced\n")
            )
            assert _result(terminal)["success"] is True
            assert editor.requests[-1] == (
                "ext/acp/fs/writeTextFile",
                {"threadId": thread_id, "path": path, "content": "replaced\n"},
            )
            assert editor.buffers[path] == "replaced\n"
            # The disk was never touched: the editor saves when its user says so.
            assert (workspace / "notes.txt").read_text() == "on disk\n"


async def test_sandbox_and_approvals_come_first(
    ide_server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    path = str((workspace / "notes.txt").resolve())
    with anyio.fail_after(20):
        async with ide_server.connect("ide", capabilities=FS) as client:
            editor = Editor(client, {path: "buffer\n"})
            editor.approve = "decline"
            thread_id = (await start_thread(client))["id"]
            _, terminal = await run_turn(
                client, thread_id, _call("write_file", path="notes.txt", content="x")
            )
            assert terminal["method"] == "turn/completed"
            assert _result(terminal)["success"] is False
            assert len(editor.approvals) == 1
            # A path that does not exist fails in the sandbox, before anything is sent.
            _, terminal = await run_turn(client, thread_id, _call("read_file", path="missing.txt"))
            assert _result(terminal)["success"] is False
            assert editor.requests == []
            assert editor.buffers[path] == "buffer\n"


async def test_clients_without_the_capability_use_the_disk(
    ide_server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    with anyio.fail_after(20):
        async with ide_server.connect("plain") as client:
            editor = Editor(client, {})
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(client, thread_id, _call("read_file", path="notes.txt"))
            assert _result(terminal)["result"] == "on disk\n"
            assert editor.requests == []


async def test_read_only_editor_edits_its_buffer_onto_the_disk(
    ide_server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    path = str((workspace / "notes.txt").resolve())
    caps = {"acpExtensions": {"fsReadTextFile": True}}
    with anyio.fail_after(20):
        async with ide_server.connect("ide", capabilities=caps) as client:
            editor = Editor(client, {path: "buffer text\n"})
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(
                client,
                thread_id,
                _call("edit_file", path="notes.txt", old_string="buffer", new_string="edited"),
            )
            assert _result(terminal)["success"] is True
            assert (workspace / "notes.txt").read_text() == "edited text\n"
            assert [m for m, _ in editor.requests] == ["ext/acp/fs/readTextFile"]


async def test_no_answer_in_time_fails_the_tool_call(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    short = EngineConfig(approval_timeout=0.3, reconnect_grace=0.3)
    with anyio.fail_after(20):
        async with (
            running_server("stdio", workspace, engine=short) as sut,
            sut.connect("ide", capabilities=FS) as client,
        ):
            editor = Editor(client, {}, answering=False)
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(client, thread_id, _call("read_file", path="notes.txt"))
            assert terminal["method"] == "turn/completed"
            result = _result(terminal)
            assert result["success"] is False
            assert "did not answer ext/acp/fs/readTextFile" in result["result"]
            assert len(editor.requests) == 1


async def test_error_and_invalid_answers_fail_the_tool_call(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    with anyio.fail_after(20):
        async with (
            running_server("websocket", workspace) as sut,
            sut.connect("ide", capabilities=FS) as client,
        ):
            client.on_server_request = lambda method, params: {"text": "no content"}
            thread_id = (await start_thread(client, config=AUTO))["id"]
            _, terminal = await run_turn(client, thread_id, _call("read_file", path="notes.txt"))
            assert _result(terminal)["success"] is False
            assert "`content` is required" in _result(terminal)["result"]
            mark = client.mark()
            client.on_server_request = None
            turn_id = await start_turn(client, thread_id, _call("read_file", path="notes.txt"))
            request = await client.wait(
                lambda m: m.get("method") == "ext/acp/fs/readTextFile" and "id" in m, start=mark
            )
            await client.send(
                {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "no"}}
            )
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            assert "the editor refused" in _result(terminal)["result"]


async def test_the_editor_disconnecting_fails_the_tool_call(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    grace = EngineConfig(approval_timeout=10, reconnect_grace=0.3)
    with anyio.fail_after(20):
        async with (
            running_server("websocket", workspace, engine=grace) as sut,
            sut.connect("observer") as observer,
        ):
            async with sut.connect("ide", capabilities=FS) as client:
                Editor(client, {}, answering=False)
                thread_id = (await start_thread(client, config=AUTO))["id"]
                await observer.request("thread/subscribe", {"threadId": thread_id})
                turn_id = await start_turn(client, thread_id, _call("read_file", path="notes.txt"))
                # Asked; it never answers and leaves.
                await client.wait(lambda m: m.get("method") == "ext/acp/fs/readTextFile")
            terminal = await wait_terminal(observer, turn_id)
            assert terminal["method"] == "turn/completed"
            result = _result(terminal)
            assert result["success"] is False
            assert "disconnected and did not come back within 0.3s" in result["result"]


async def test_a_reconnecting_editor_is_asked_again(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("on disk\n")
    path = str((workspace / "notes.txt").resolve())
    with anyio.fail_after(20):
        async with running_server("websocket", workspace) as sut:
            async with sut.connect("ide", capabilities=FS) as first:
                Editor(first, {}, answering=False)
                thread_id = (await start_thread(first, config=AUTO))["id"]
                turn_id = await start_turn(first, thread_id, _call("read_file", path="notes.txt"))
                await first.wait(lambda m: m.get("method") == "ext/acp/fs/readTextFile")
            # The window reloads and subscribes again: it is asked the same question.
            async with sut.connect("ide", capabilities=FS) as second:
                editor = Editor(second, {path: "the buffer\n"})
                await second.request("thread/subscribe", {"threadId": thread_id})
                terminal = await wait_terminal(second, turn_id)
                assert _result(terminal)["result"] == "the buffer\n"
                assert [m for m, _ in editor.requests] == ["ext/acp/fs/readTextFile"]
