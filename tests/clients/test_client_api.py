"""The Python client (clients/python) against a real server: typed methods,
errors, notification iterators, approvals, run_turn, stdio spawn."""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from appserver_client import (
    METHODS,
    AppServerClient,
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    Notification,
    NotificationOverflow,
    RpcError,
)
from appserver_client._generated import ApprovalRequestParams
from websockets.asyncio.server import ServerConnection, serve

from appserver.transport.listen_options import ListenerOptions
from tests.support.servers import child_env, running_server, server_command

ROOT = Path(__file__).resolve().parents[2]
IDENTITY: Any = {"channelName": "cli", "userId": "local"}


@asynccontextmanager
async def open_client(kind: str, workspace: Path, **options: Any) -> AsyncIterator[AppServerClient]:
    """A client over ``kind`` ("websocket": in-process server; "stdio": a real
    ``appserver`` subprocess) to a fresh server for ``workspace``."""
    if kind == "stdio":
        argv = server_command(workspace)
        async with AppServerClient.spawn(argv, env=child_env(), stderr="capture", **options) as c:
            yield c
        return
    async with running_server("websocket", workspace) as sut:
        assert sut.url is not None
        async with AppServerClient.connect(sut.url, **options) as client:
            yield client


async def new_thread(client: AppServerClient) -> str:
    result = await client.thread_start(identity=IDENTITY)
    return result["thread"]["id"]


def appserver_command() -> str:
    """The real console script installed next to this interpreter."""
    path = Path(sys.executable).parent / "appserver"
    assert path.exists(), "the appserver console script is not installed"
    return str(path)


# --- the generated surface ----------------------------------------------------


def test_every_method_in_the_schema_has_a_typed_method() -> None:
    schema = json.loads((ROOT / "schema" / "protocol.schema.json").read_text())
    assert set(METHODS) == set(schema["x-methods"])
    for wire, attr in METHODS.items():
        method = getattr(AppServerClient, attr)
        assert inspect.iscoroutinefunction(method), wire
        assert wire in (method.__doc__ or ""), wire
    signature = inspect.signature(AppServerClient.thread_mode_set)
    assert list(signature.parameters) == ["self", "thread_id", "mode", "timeout"]
    assert METHODS["turn/queue/remove"] == "turn_queue_remove"


async def test_typed_methods_round_trip(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        assert client.server_info["protocolVersion"] == "1"
        assert client.server_capabilities["threadManagement"] is True
        started = await client.thread_start(identity=IDENTITY, display_name="first")
        thread_id = started["thread"]["id"]
        assert started["thread"]["displayName"] == "first"
        assert await client.thread_rename(thread_id=thread_id, display_name="renamed") == {}
        await client.thread_mode_set(thread_id=thread_id, mode="plan")
        await client.thread_config_update(thread_id=thread_id, config={"model": "offline"})
        read = await client.thread_read(thread_id=thread_id)
        assert read["thread"]["displayName"] == "renamed"
        assert read["thread"].get("configuration", {}).get("model") == "offline"
        listed = await client.thread_list(identity=IDENTITY)
        assert [summary["id"] for summary in listed["data"]] == [thread_id]
        # The untyped escape hatch speaks the same wire.
        raw = await client.request("thread/read", {"threadId": thread_id})
        assert raw["thread"]["id"] == thread_id


async def test_errors_raise_rpc_error_with_code_and_data(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        with pytest.raises(RpcError) as missing:
            await client.thread_read(thread_id="thread_20000101_nope00")
        assert missing.value.code == -32010
        assert missing.value.method == "thread/read"
        thread_id = await new_thread(client)
        with pytest.raises(RpcError) as invalid:
            await client.thread_rollback(thread_id=thread_id, num_turns=0)
        assert invalid.value.code == -32602
        assert invalid.value.data is not None
        with pytest.raises(RpcError) as unknown:
            await client.request("no/such/method", {})
        assert unknown.value.code == -32601


# --- notifications --------------------------------------------------------------


async def test_notification_iterators_filter_by_thread_turn_and_method(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        first, second = await new_thread(client), await new_thread(client)
        everything = client.notifications()
        by_thread = client.notifications(thread_id=first)
        terminal = client.notifications(methods=["turn/completed", "turn/failed"])
        items = client.notifications(methods=["item/*"], thread_id=second)
        one = await client.run_turn(first, "one")
        two = await client.run_turn(second, "two")
        by_turn = client.notifications(turn_id=two.turn["id"])  # created late: sees nothing
        for stream in (everything, by_thread, terminal, items, by_turn):
            await stream.aclose()

        async def drain(stream: Any) -> list[Notification]:
            return [n async for n in stream]

        all_seen = await drain(everything)
        assert {n.thread_id for n in all_seen} >= {first, second}
        first_seen = await drain(by_thread)
        assert first_seen and {n.thread_id for n in first_seen} == {first}
        assert [n.method for n in first_seen if n.is_terminal] == ["turn/completed"]
        assert [n.turn_id for n in await drain(terminal)] == [one.turn["id"], two.turn["id"]]
        item_seen = await drain(items)
        assert item_seen and all(n.method.startswith("item/") for n in item_seen)
        assert {n.thread_id for n in item_seen} == {second}
        assert await drain(by_turn) == []
        # Every thread notification carries seq, increasing per thread.
        seqs = [n.seq for n in first_seen]
        assert all(isinstance(s, int) for s in seqs) and seqs == sorted(set(seqs))  # type: ignore[type-var]
        assert client.last_seq(first) == seqs[-1]


async def test_turn_filter_and_independent_iterators(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        thread_id = await new_thread(client)
        first = await client.run_turn(thread_id, "first")
        watch_a = client.notifications(thread_id=thread_id)
        watch_b = client.notifications(thread_id=thread_id, methods=["item/agentMessage/delta"])
        second = await client.run_turn(thread_id, "second")
        await watch_a.aclose()
        await watch_b.aclose()
        seen_a = [n async for n in watch_a]
        assert {n.turn_id for n in seen_a if n.turn_id} == {second.turn["id"]}
        assert first.turn["id"] != second.turn["id"]
        text = "".join([n.params["delta"] async for n in watch_b])
        assert text == "You said: second" == second.text


async def test_a_lagging_iterator_overflows_instead_of_blocking(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        thread_id = await new_thread(client)
        small = client.notifications(thread_id=thread_id, buffer=3)
        outcome = await client.run_turn(thread_id, "?stream 20")  # the read loop never waited
        assert outcome.text.startswith("chunk 1 ")
        received: list[Notification] = []
        with pytest.raises(NotificationOverflow) as overflow:
            while True:
                received.append(await small.next(timeout=5))
        assert len(received) == 3 and overflow.value.buffer == 3
        assert overflow.value.dropped == 1  # it detached at the first one it could not take


# --- approvals ------------------------------------------------------------------


def _result_text(items: list[Any]) -> str:
    return next(str(item["payload"]["result"]) for item in items if item["type"] == "toolResult")


async def test_sync_approval_handler_accepts(workspace: Path) -> None:
    asked: list[ApprovalRequestParams] = []

    def approve(params: ApprovalRequestParams) -> str:
        asked.append(params)
        return "accept"

    async with open_client("websocket", workspace, approval_handler=approve) as client:
        thread_id = await new_thread(client)
        outcome = await client.run_turn(thread_id, "!echo hi")
        assert outcome.status == "completed"
        assert outcome.text == "The command exited with code 0."
        assert "hi" in _result_text(outcome.items)
        assert [p["operation"] for p in asked] == ["echo hi"]
        assert asked[0]["approvalType"] == "shell" and asked[0]["threadId"] == thread_id


async def test_async_approval_handler_can_decline_with_a_result_object(workspace: Path) -> None:
    async def approve(params: ApprovalRequestParams) -> dict[str, str]:
        await asyncio.sleep(0.01)
        return {"decision": "decline"}

    async with open_client("websocket", workspace, approval_handler=approve) as client:
        thread_id = await new_thread(client)
        outcome = await client.run_turn(thread_id, "!echo hi")
        assert _result_text(outcome.items).startswith("Declined")
        assert outcome.text == "The shell call was declined."
        decisions = [
            i["payload"]["decision"] for i in outcome.items if i["type"] == "approvalResponse"
        ]
        assert decisions == ["decline"]


async def test_without_a_handler_approvals_are_declined(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        thread_id = await new_thread(client)
        outcome = await client.run_turn(thread_id, "!echo hi")
        assert _result_text(outcome.items).startswith("Declined")
        # A handler that fails, or answers nonsense, declines too.
        client.approval_handler = lambda params: "maybe"
        outcome = await client.run_turn(thread_id, "!echo again")
        assert _result_text(outcome.items).startswith("Declined")


async def test_cancel_decision_cancels_the_turn(workspace: Path) -> None:
    async with open_client("websocket", workspace, approval_handler=lambda p: "cancel") as client:
        thread_id = await new_thread(client)
        outcome = await client.run_turn(thread_id, "!echo hi")
        assert (outcome.status, outcome.reason) == ("cancelled", "approvalCancelled")
        assert not outcome.ok


# --- run_turn -------------------------------------------------------------------


async def test_run_turn_returns_text_items_and_streams(workspace: Path) -> None:
    async with open_client("websocket", workspace) as client:
        thread_id = await new_thread(client)
        deltas: list[str] = []

        async def on_notification(notification: Notification) -> None:
            if notification.method == "item/agentMessage/delta":
                deltas.append(notification.params["delta"])

        outcome = await client.run_turn(thread_id, "hello there", on_notification=on_notification)
        assert outcome.ok and outcome.status == "completed"
        assert outcome.text == "You said: hello there" == "".join(deltas)
        assert [item["type"] for item in outcome.items] == ["userMessage", "agentMessage"]
        assert outcome.turn["status"] == "completed" and outcome.turn["threadId"] == thread_id
        failed = await client.run_turn(thread_id, "?fail unavailable it broke")
        assert failed.status == "failed" and failed.error


# --- stdio ------------------------------------------------------------------------


async def test_spawn_runs_the_real_appserver_command(workspace: Path) -> None:
    argv = [appserver_command(), "app-server", "--workspace", str(workspace)]
    client = await AppServerClient.spawn(argv, env=child_env(), stderr="capture")
    try:
        assert client.kind == "stdio"
        thread_id = await new_thread(client)
        outcome = await client.run_turn(thread_id, "hello")
        assert outcome.text == "You said: hello"
    finally:
        await client.close()
    process = client.transport.process  # type: ignore[union-attr]
    assert process.returncode == 0  # closing stdin let it exit on its own
    with pytest.raises(ClientClosed):
        await client.thread_list(identity=IDENTITY)


async def test_a_dead_stdio_server_fails_requests_and_iterators(workspace: Path) -> None:
    async with open_client("stdio", workspace) as client:
        thread_id = await new_thread(client)
        stream = client.notifications(thread_id=thread_id)
        process = client.transport.process  # type: ignore[union-attr]
        process.send_signal(signal.SIGKILL)
        with pytest.raises(ConnectionLost, match="exited"):
            async for _ in stream:
                pass
        with pytest.raises(ConnectionLost):
            await client.thread_read(thread_id=thread_id)


async def test_spawn_reports_a_command_that_cannot_start(tmp_path: Path) -> None:
    with pytest.raises(ConnectFailed):
        await AppServerClient.spawn([str(tmp_path / "no-such-appserver")])


# --- WebSocket specifics ------------------------------------------------------------


async def test_token_is_sent_and_a_wrong_one_is_refused(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut:
        assert sut.app is not None
        options = ListenerOptions(host="127.0.0.1", port=0, token="s3cret-token")
        async with sut.app.listen_websocket(options):
            url = sut.app.endpoints["appServerWebSocket"]
            with pytest.raises(ConnectFailed) as refused:
                await AppServerClient.connect(url, token="wrong")
            assert refused.value.permanent
            base = url.removesuffix("/ws")  # the /ws path is added when missing
            async with AppServerClient.connect(base, token="s3cret-token") as client:
                assert (await client.thread_list(identity=IDENTITY))["data"] == []


@asynccontextmanager
async def scripted_peer(script: Any) -> AsyncIterator[str]:
    """A minimal WebSocket JSON-RPC peer that answers ``initialize`` and then
    runs ``script(ws)``; for client behaviour no real server can trigger."""

    async def handler(ws: ServerConnection) -> None:
        hello = json.loads(await ws.recv())
        await ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": hello["id"],
                    "result": {"serverInfo": {"name": "peer", "version": "0"}, "capabilities": {}},
                }
            )
        )
        assert json.loads(await ws.recv())["method"] == "initialized"
        await script(ws)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws"


async def test_unknown_server_requests_get_method_not_found_and_handlers_answer() -> None:
    answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def script(ws: ServerConnection) -> None:
        await ws.send(
            json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ext/unknown", "params": {}})
        )
        await answers.put(json.loads(await ws.recv()))
        await ws.send(
            json.dumps({"jsonrpc": "2.0", "id": 8, "method": "item/tool/call", "params": {"x": 1}})
        )
        await answers.put(json.loads(await ws.recv()))
        await ws.wait_closed()

    async with scripted_peer(script) as url, AppServerClient.connect(url) as client:
        client.set_request_handler("item/tool/call", lambda params: {"echo": params["x"]})
        unknown = await asyncio.wait_for(answers.get(), 5)
        assert unknown["id"] == 7 and unknown["error"]["code"] == -32601
        handled = await asyncio.wait_for(answers.get(), 5)
        assert handled == {"jsonrpc": "2.0", "id": 8, "result": {"echo": 1}}


async def test_requests_time_out_per_call_and_by_default() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.wait_closed()  # never answers anything

    async with (
        scripted_peer(script) as url,
        AppServerClient.connect(url, request_timeout=0.2) as client,
    ):
        with pytest.raises(TimeoutError):
            await client.thread_list(identity=IDENTITY)
        with pytest.raises(TimeoutError):
            await client.thread_read(thread_id="t", timeout=0.05)


async def test_overloaded_requests_are_retried() -> None:
    async def script(ws: ServerConnection) -> None:
        first = json.loads(await ws.recv())
        error = {"code": -32001, "message": "Server overloaded; retry later."}
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": first["id"], "error": error}))
        second = json.loads(await ws.recv())
        assert second["method"] == first["method"]
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": second["id"], "result": {"data": []}}))
        await ws.wait_closed()

    async with scripted_peer(script) as url, AppServerClient.connect(url) as client:
        assert await client.thread_list(identity=IDENTITY) == {"data": []}


def test_the_client_package_does_not_import_the_server() -> None:
    # With `appserver` made unimportable, the whole client still imports.
    code = (
        "import sys; sys.modules['appserver'] = None\n"
        "import appserver_client, appserver_client.cli, appserver_client._generated\n"
        "print(len(appserver_client.METHODS))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(METHODS)


def test_wire_types_are_public_in_appserver_client_types() -> None:
    import appserver_client._generated as generated
    import appserver_client.types as types
    from appserver_client.types import (
        ApprovalRequestParams as PublicApproval,
    )
    from appserver_client.types import (
        NotificationMethod,
        SessionIdentity,
        ThreadResult,
        ThreadStartParams,
        TurnNotification,
    )

    assert PublicApproval is ApprovalRequestParams
    assert "identity" in ThreadStartParams.__annotations__
    assert {"threadId", "turn"} <= set(TurnNotification.__annotations__)
    assert {"channelName", "userId"} <= set(SessionIdentity.__annotations__)
    assert "thread" in ThreadResult.__annotations__
    assert "turn/completed" in NotificationMethod.__args__
    repo = Path(__file__).resolve().parents[2]
    schema = json.loads((repo / "schema" / "protocol.schema.json").read_text("utf-8"))
    assert set(schema["$defs"]) <= set(types.__all__)
    assert all(getattr(types, name) is getattr(generated, name) for name in types.__all__)
    assert "GeneratedMethods" not in types.__all__
