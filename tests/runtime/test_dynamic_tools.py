"""Client tools end to end: ``thread/start.dynamicTools`` offered to the model,
a call becomes ``item/tool/call`` to the owning client and a ``dynamicToolCall``
item, and no call ever hangs the turn (timeout, disconnect, invalid answer);
an owner that comes back is asked again (docs/tools.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.providers.base import ModelRequest
from appserver.runtime.turns import EngineConfig
from appserver.runtime.turns.client_tools import model_text, parse_tool_result
from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY, start_thread
from tests.support.servers import TRANSPORTS, ServerUnderTest, running_server
from tests.support.turns import one_item, run_turn, start_turn, turn_events, wait_terminal

TOOLS = [
    {
        "namespace": "ide",
        "name": "lookup",
        "description": "Look a word up in the editor.",
        "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
    {
        "name": "clock",
        "description": "The time.",
        "inputSchema": {"type": "object"},
    },
]

SHORT = EngineConfig(approval_timeout=0.3, reconnect_grace=0.3)
GRACE = EngineConfig(approval_timeout=10, reconnect_grace=0.3)  # a gone owner, not a timeout


class ToolHost:
    """Answers ``item/tool/call`` (``answer(params)``; ``None``: never answers)."""

    def __init__(self, client: RpcClient, answer: Any = None) -> None:
        self.client = client
        self.answer = answer
        self.calls: list[dict[str, Any]] = []
        self._changed = anyio.Event()
        client.on_server_request = self._handle

    def _handle(self, method: str, params: Any) -> Any:
        assert method == "item/tool/call", method
        self.calls.append(params)
        self._changed.set()
        self._changed = anyio.Event()
        return self.answer(params) if self.answer is not None else None

    async def wait_call(self, count: int = 1) -> dict[str, Any]:
        with anyio.fail_after(10):
            while len(self.calls) < count:
                changed = self._changed
                await changed.wait()
        return self.calls[count - 1]


async def _thread(client: RpcClient, tools: list[dict[str, Any]] = TOOLS) -> str:
    thread = await start_thread(client, dynamicTools=tools)
    return str(thread["id"])


def _dynamic_items(client: RpcClient, turn_id: str, method: str) -> list[dict[str, Any]]:
    return [
        m["params"]["item"]
        for m in turn_events(client, turn_id)
        if m["method"] == method and m["params"]["item"]["type"] == "dynamicToolCall"
    ]


def _final_text(terminal: dict[str, Any]) -> str:
    texts = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "agentMessage"]
    return str(texts[-1]["payload"]["text"])


async def test_the_model_calls_a_client_tool(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            host = ToolHost(
                client,
                lambda p: {"success": True, "contentItems": [{"type": "text", "text": "a fruit"}]},
            )
            thread_id = await _thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(
                client, thread_id, '?tool ide__lookup {"word": "apple"}'
            )
            assert terminal["method"] == "turn/completed"
            assert host.calls == [
                {
                    "threadId": thread_id,
                    "turnId": turn_id,
                    "callId": host.calls[0]["callId"],
                    "namespace": "ide",
                    "tool": "lookup",
                    "arguments": {"word": "apple"},
                }
            ]
            started = _dynamic_items(client, turn_id, "item/started")
            completed = _dynamic_items(client, turn_id, "item/completed")
            assert len(started) == len(completed) == 1
            assert started[0]["payload"] == {
                "namespace": "ide",
                "toolName": "lookup",
                "callId": host.calls[0]["callId"],
                "arguments": {"word": "apple"},
            }
            assert completed[0]["payload"]["success"] is True
            assert completed[0]["payload"]["contentItems"] == [{"type": "text", "text": "a fruit"}]
            # The only projection: no toolCall / toolResult items for it.
            kinds = {i["type"] for i in terminal["params"]["turn"]["items"]}
            assert "toolCall" not in kinds and "toolResult" not in kinds
            assert "a fruit" in _final_text(terminal)
            assert one_item(client, turn_id, "dynamicToolCall", mark)["status"] == "completed"


async def test_structured_result_and_tool_without_namespace(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            ToolHost(client, lambda p: {"success": True, "structuredResult": {"hour": 9}})
            thread_id = await _thread(client)
            turn_id, terminal = await run_turn(client, thread_id, "?tool clock")
            assert terminal["method"] == "turn/completed"
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert "namespace" not in item["payload"]
            assert item["payload"]["structuredResult"] == {"hour": 9}
            assert '{"hour": 9}' in _final_text(terminal)


async def test_client_error_and_invalid_answers_fail_the_call(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            answers = iter(
                [
                    {"success": False, "errorCode": "busy", "errorMessage": "editor busy"},
                    {"contentItems": "nope"},
                ]
            )
            ToolHost(client, lambda p: next(answers))
            thread_id = await _thread(client)
            turn_id, terminal = await run_turn(client, thread_id, "?tool clock")
            assert terminal["method"] == "turn/completed"
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is False
            assert item["payload"]["errorMessage"] == "editor busy"
            assert "editor busy" in _final_text(terminal)
            turn_id, terminal = await run_turn(client, thread_id, "?tool clock")
            assert terminal["method"] == "turn/completed"
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is False
            assert item["payload"]["errorCode"] == "invalidResult"


@pytest.fixture(params=TRANSPORTS)
async def short_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    async with running_server(request.param, workspace, engine=SHORT) as sut:
        yield sut


@pytest.fixture(params=["memory", "websocket"])
async def short_multi_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    async with running_server(request.param, workspace, engine=GRACE) as sut:
        yield sut


async def test_no_answer_in_time_fails_the_call(short_server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with short_server.connect() as client:
            host = ToolHost(client, None)  # never answers
            thread_id = await _thread(client)
            turn_id, terminal = await run_turn(client, thread_id, "?tool clock")
            assert terminal["method"] == "turn/completed"
            assert len(host.calls) == 1
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is False
            assert item["payload"]["errorCode"] == "toolCallTimeout"


async def test_owner_gone_fails_the_call(short_multi_server: ServerUnderTest) -> None:
    sut = short_multi_server
    with anyio.fail_after(15):
        async with sut.connect("observer") as observer:
            async with sut.connect("owner") as owner:
                host = ToolHost(owner, None)
                thread_id = await _thread(owner)
                await observer.request("thread/subscribe", {"threadId": thread_id})
                turn_id = await start_turn(owner, thread_id, "?tool clock")
                await host.wait_call()
            # The observer subscribed while the owner was there: it is not asked.
            terminal = await wait_terminal(observer, turn_id)
            assert terminal["method"] == "turn/completed"
            (item,) = _dynamic_items(observer, turn_id, "item/completed")
            assert item["payload"]["errorCode"] == "toolCallClientGone"
            assert not [m for m in observer.messages if m.get("method") == "item/tool/call"]


async def test_a_reconnecting_owner_is_asked_again(multi_server: ServerUnderTest) -> None:
    sut = multi_server
    with anyio.fail_after(15):
        async with sut.connect("first") as first:
            host = ToolHost(first, None)
            thread_id = await _thread(first)
            turn_id = await start_turn(first, thread_id, "?tool ide__lookup {}")
            request = await host.wait_call()
        async with sut.connect("second") as second:
            again = ToolHost(
                second,
                lambda p: {"success": True, "contentItems": [{"type": "text", "text": "back"}]},
            )
            await second.request("thread/subscribe", {"threadId": thread_id})
            terminal = await wait_terminal(second, turn_id)
            assert terminal["method"] == "turn/completed"
            assert again.calls == [request]
            (item,) = [
                i for i in terminal["params"]["turn"]["items"] if i["type"] == "dynamicToolCall"
            ]
            assert item["payload"]["success"] is True
            assert "back" in _final_text(terminal)


async def test_resume_binds_the_tools_to_the_resuming_client(
    multi_server: ServerUnderTest,
) -> None:
    sut = multi_server
    with anyio.fail_after(15):
        async with sut.connect("first") as first:
            first_host = ToolHost(first, None)
            thread_id = await _thread(first)
            async with sut.connect("second") as second:
                host = ToolHost(second, lambda p: {"success": True, "structuredResult": 1})
                await second.request("thread/resume", {"threadId": thread_id})
                await second.request("thread/subscribe", {"threadId": thread_id})
                turn_id, terminal = await run_turn(second, thread_id, "?tool clock")
                assert terminal["method"] == "turn/completed"
                assert len(host.calls) == 1 and first_host.calls == []
                (item,) = _dynamic_items(second, turn_id, "item/completed")
                assert item["payload"]["success"] is True


async def test_tools_are_offered_per_thread(workspace: Path) -> None:
    seen: list[list[str]] = []

    class Recorder:
        default_model = "rec"

        async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
            from appserver.providers.base import Stop, TextDelta

            seen.append([spec.name for spec in request.tools])
            yield TextDelta("ok")
            yield Stop("end_turn")

    async with (
        running_server("memory", workspace, provider=Recorder()) as sut,
        sut.connect() as client,
    ):
        with_tools = await _thread(client)
        await run_turn(client, with_tools, "hi")
        plain = await _thread(client, [])
        await run_turn(client, plain, "hi")
    assert "ide__lookup" in seen[0] and "clock" in seen[0]
    assert "ide__lookup" not in seen[1] and "clock" not in seen[1]


def test_answers_are_checked_and_turned_into_model_text() -> None:
    assert parse_tool_result({"success": True}) == {"success": True}
    assert parse_tool_result({})["errorCode"] == "invalidResult"
    bad_part = {"success": True, "contentItems": [{"type": "audio"}]}
    assert parse_tool_result(bad_part)["errorCode"] == "invalidResult"
    image = {"success": True, "contentItems": [{"type": "image", "imageUrl": "data:x"}]}
    assert model_text(parse_tool_result(image)) == "[image: data:x]"
    assert model_text({"success": False, "errorCode": "x"}) == "Error: x"


# --- the Python client's handler API ------------------------------------------------


@pytest.mark.parametrize("kind", ["stdio", "websocket"])
async def test_python_client_on_tool_call(kind: str, workspace: Path) -> None:
    from appserver_client import AppServerClient
    from appserver_client.types import ToolCallParams

    from tests.clients.test_client_api import open_client

    seen: list[ToolCallParams] = []

    async def lookup(params: ToolCallParams) -> dict[str, Any]:
        seen.append(params)
        word = params["arguments"].get("word")
        return {"success": True, "contentItems": [{"type": "text", "text": f"{word}: a fruit"}]}

    with anyio.fail_after(30):
        client: AppServerClient
        async with open_client(kind, workspace) as client:
            client.on_tool_call(lookup)
            result = await client.thread_start(
                identity={"channelName": "cli", "userId": "local"},
                dynamic_tools=[TOOLS[0]],  # type: ignore[list-item]
            )
            thread_id = result["thread"]["id"]
            outcome = await client.run_turn(thread_id, '?tool ide__lookup {"word": "apple"}')
            assert outcome.ok
            assert [p["tool"] for p in seen] == ["lookup"] and seen[0]["namespace"] == "ide"
            (item,) = [i for i in outcome.items if i["type"] == "dynamicToolCall"]
            assert item["payload"]["success"] is True
            assert "apple: a fruit" in outcome.text
            # Without a handler the call fails ("no handler"); the turn completes.
            client.on_tool_call(None)
            outcome = await client.run_turn(thread_id, "?tool ide__lookup {}")
            assert outcome.ok
            (item,) = [i for i in outcome.items if i["type"] == "dynamicToolCall"]
            assert item["payload"]["success"] is False
            assert item["payload"]["errorMessage"] == "no handler"


async def test_tools_are_stored_with_the_thread(workspace: Path) -> None:
    """After a restart the thread still offers its tools; the client that
    resumes it runs them."""
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            thread_id = await _thread(client)
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            host = ToolHost(client, lambda p: {"success": True, "structuredResult": "ok"})
            await client.request("thread/resume", {"threadId": thread_id})
            turn_id, terminal = await run_turn(client, thread_id, "?tool clock")
            assert terminal["method"] == "turn/completed"
            assert [c["tool"] for c in host.calls] == ["clock"]
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is True


async def test_with_no_owner_the_client_starting_the_turn_is_asked(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            thread_id = await _thread(client)
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            host = ToolHost(client, lambda p: {"success": True})
            turn_id, terminal = await run_turn(client, thread_id, "?tool clock")
            assert terminal["method"] == "turn/completed"
            assert len(host.calls) == 1
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is True


def test_later_turns_see_client_tool_calls_and_their_answers() -> None:
    from appserver.runtime.history import messages_from_items
    from appserver.storage.records import ItemRecord

    def item(seq: int, kind: str, payload: dict[str, Any]) -> ItemRecord:
        return ItemRecord("t", "turn_1", f"i{seq}", seq, kind, "completed", "now", payload=payload)

    answered = {"namespace": "ide", "toolName": "open", "callId": "c1", "arguments": {"p": 1}}
    answered |= {"success": True, "contentItems": [{"type": "text", "text": "opened"}]}
    messages = messages_from_items(
        [
            item(1, "userMessage", {"text": "open it"}),
            item(2, "dynamicToolCall", answered),
            item(3, "dynamicToolCall", {"toolName": "ask", "callId": "c2", "arguments": {}}),
            item(4, "agentMessage", {"text": "done"}),
        ]
    )
    assert [(m.role, m.content) for m in messages] == [
        ("user", "open it"),
        ("assistant", ""),
        ("tool", "opened"),
        ("assistant", ""),
        # Never answered (the turn ended first): a synthetic result closes it.
        ("tool", "The tool call did not complete (the turn ended first)."),
        ("assistant", "done"),
    ]
    assert messages[1].tool_calls[0].name == "ide__open"
    assert messages[1].tool_calls[0].arguments == {"p": 1}
    assert messages[4].tool_call_id == "c2"


FETCH = {
    "name": "fetch",
    "description": "Fetch a URL in the client.",
    "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}},
    "approval": {"kind": "remoteResource", "targetArgument": "url", "operation": "fetch"},
}


class ApprovingHost(ToolHost):
    """A tool host that also answers approvals with ``decision``."""

    def __init__(self, client: RpcClient, answer: Any, decision: str) -> None:
        super().__init__(client, answer)
        self.decision = decision
        self.approvals: list[dict[str, Any]] = []

    def _handle(self, method: str, params: Any) -> Any:
        if method == "item/approval/request":
            self.approvals.append(params)
            return {"decision": self.decision}
        return super()._handle(method, params)


@pytest.mark.parametrize("kind", ["stdio", "websocket"])
async def test_a_tools_approval_hint_asks_first(kind: str, workspace: Path) -> None:
    call = '?tool fetch {"url": "https://example.test/a"}'
    with anyio.fail_after(15):
        async with (
            running_server(kind, workspace) as sut,
            sut.connect() as client,
        ):
            host = ApprovingHost(client, lambda p: {"success": True}, "decline")
            thread_id = await _thread(client, [FETCH])
            turn_id, terminal = await run_turn(client, thread_id, call)
            assert terminal["method"] == "turn/completed"
            (asked,) = host.approvals
            assert asked["approvalType"] == "remoteResource"
            assert asked["operation"] == "fetch"
            assert asked["target"] == "https://example.test/a"
            # Declined: the client is not asked to run it; the item says why.
            assert host.calls == []
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is False
            assert item["payload"]["errorCode"] == "approvalDeclined"

            host.decision = "acceptForSession"
            await run_turn(client, thread_id, call)
            assert len(host.calls) == 1 and len(host.approvals) == 2
            # The session grant covers the same operation on the same target.
            _, terminal = await run_turn(client, thread_id, call)
            assert len(host.calls) == 2 and len(host.approvals) == 2
            assert terminal["method"] == "turn/completed"


async def test_lone_surrogates_from_the_model_or_the_client_do_not_stop_a_turn(
    server: ServerUnderTest,
) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            answer = {"success": True, "contentItems": [{"type": "text", "text": "a \ud800 b"}]}
            host = ToolHost(client, lambda p: answer)
            thread = await start_thread(
                client, dynamicTools=TOOLS, config={"approvalPolicy": "autoApprove"}
            )
            thread_id = str(thread["id"])
            # The model's JSON carries "\ud800" (a lone surrogate): it becomes U+FFFD.
            turn_id, terminal = await run_turn(
                client, thread_id, '?tool ide__lookup {"word": "\\ud800"}'
            )
            assert terminal["method"] == "turn/completed"
            assert host.calls[0]["arguments"] == {"word": "\ufffd"}
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["contentItems"] == [{"type": "text", "text": "a \ufffd b"}]
            _, terminal = await run_turn(
                client, thread_id, '?tool shell {"command": "echo \\udfff"}'
            )
            assert terminal["method"] == "turn/completed"


async def test_an_approval_hint_without_kind_or_target_is_refused(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for approval in (
            {"type": "file", "targetArgument": "path"},
            {"kind": "", "targetArgument": "p"},
        ):
            tool = {**FETCH, "approval": approval}
            failure = await client.fail(
                "thread/start", {"identity": IDENTITY, "dynamicTools": [tool]}
            )
            assert failure.code == -32602


def test_scrubbing_replaces_lone_surrogates_and_keeps_clean_values() -> None:
    from appserver.protocol.encoding import scrub_surrogates

    clean = {"a": ["x", {"k": 1}], "b": "ü"}
    assert scrub_surrogates(clean) is clean  # nothing copied on the usual path
    dirty = {"a": ["x", "\ud800"], "\udc00": {"k": "y\udfff"}}
    assert scrub_surrogates(dirty) == {"a": ["x", "\ufffd"], "\ufffd": {"k": "y\ufffd"}}


async def test_a_call_with_unparsable_arguments_is_not_sent(server: ServerUnderTest) -> None:
    """The client is not asked with ``{}``: the item fails (``invalidArguments``)
    and the model is told why."""
    with anyio.fail_after(15):
        async with server.connect() as client:
            host = ToolHost(client, lambda p: {"success": True, "contentItems": []})
            thread_id = await _thread(client)
            turn_id, terminal = await run_turn(client, thread_id, '?tool clock {"tz": ')
            assert terminal["method"] == "turn/completed"
            (item,) = _dynamic_items(client, turn_id, "item/completed")
            assert item["payload"]["success"] is False
            assert item["payload"]["errorCode"] == "invalidArguments"
            assert "not valid JSON" in item["payload"]["errorMessage"]
            assert "not valid JSON" in _final_text(terminal)
            assert host.calls == []
