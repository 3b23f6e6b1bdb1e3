"""The desktop's Node REPL (DotCraft's ``nodeRepl`` + ``browserUse``): on threads
bound to a client that declared both, the model is offered ``NodeReplJs``; a
call is ``ext/nodeRepl/evaluate`` and one ``pluginFunctionCall`` item whose
images reach the model; a failure fails the call, not the turn; an evaluation
the server stops waiting for is followed by ``ext/nodeRepl/cancel``
(docs/tools.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.providers.base import ModelEvent, ModelRequest
from appserver.providers.offline import OfflineProvider
from appserver.runtime.turns import EngineConfig
from appserver.runtime.turns.node_repl import timeout_seconds
from tests.support.client import RpcClient
from tests.support.helpers import start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import run_turn, start_turn, wait_terminal

DESKTOP = {
    "nodeRepl": {"backend": "desktop-node"},
    "browserUse": {"backend": "desktop-iab", "protocolVersion": 2, "supportsCancel": True},
}
# A 1x1 PNG.
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


def _call(code: str, **extra: Any) -> str:
    return f"?tool NodeReplJs {json.dumps({'code': code, **extra})}"


class Desktop:
    """Answers ``ext/nodeRepl/*`` (``answer(params)``; ``None``: never answers evaluate)."""

    def __init__(self, client: RpcClient, answer: Any = None) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, Any]]] = []
        client.on_server_request = self._handle

    def _handle(self, method: str, params: Any) -> Any:
        self.requests.append((method, params))
        if method == "ext/nodeRepl/cancel":
            return {"ok": True}
        assert method == "ext/nodeRepl/evaluate", method
        return self.answer(params) if self.answer is not None else None


def _repl_item(terminal: dict[str, Any]) -> dict[str, Any]:
    (item,) = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "pluginFunctionCall"]
    return dict(item["payload"])


def _final_text(terminal: dict[str, Any]) -> str:
    texts = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "agentMessage"]
    return str(texts[-1]["payload"]["text"])


async def test_an_evaluation_answered_with_text_and_an_image(server: ServerUnderTest) -> None:
    answer = {
        "text": "opened example.com",
        "resultText": "'Example Domain'",
        "images": [{"mediaType": "image/png", "dataBase64": PIXEL}],
        "logs": ["navigated"],
    }
    with anyio.fail_after(20):
        async with server.connect("desktop", capabilities=DESKTOP) as client:
            desktop = Desktop(client, lambda params: answer)
            thread_id = (await start_thread(client))["id"]
            code = "await agent.browser.open('https://example.com')"
            _, terminal = await run_turn(client, thread_id, _call(code, timeoutSeconds=5))
            assert terminal["method"] == "turn/completed"
            ((method, params),) = desktop.requests
            assert method == "ext/nodeRepl/evaluate"
            assert params["evaluationId"].startswith("node-repl-")
            assert params == {
                "threadId": thread_id,
                "evaluationId": params["evaluationId"],
                "code": code,
                "timeoutMs": 5000,
            }
            payload = _repl_item(terminal)
            assert payload["pluginId"] == "browser-use"
            assert payload["namespace"] == "node_repl"
            assert payload["functionName"] == "NodeReplJs"
            assert payload["success"] is True
            assert payload["contentItems"] == [
                {"type": "text", "text": "opened example.com\n'Example Domain'\nnavigated"},
                {"type": "image", "dataBase64": PIXEL, "mediaType": "image/png"},
            ]
            # Its only projection: no toolCall / toolResult for it.
            kinds = {i["type"] for i in terminal["params"]["turn"]["items"]}
            assert "toolCall" not in kinds and "toolResult" not in kinds
            assert _final_text(terminal).startswith("NodeReplJs returned: opened example.com")


class Recorder(OfflineProvider):
    """The offline model, keeping every request it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.requests.append(request)
        return super().stream(request)


async def test_the_tool_is_offered_to_desktop_threads_and_the_model_sees_the_image(
    workspace: Path,
) -> None:
    model = Recorder()
    answer = {"images": [{"mediaType": "image/png", "dataBase64": PIXEL}, {"dataBase64": "%%"}]}
    async with running_server("memory", workspace, provider=model) as sut:
        async with sut.connect("desktop", capabilities=DESKTOP) as client:
            Desktop(client, lambda params: answer)
            thread_id = (await start_thread(client))["id"]
            _, terminal = await run_turn(client, thread_id, _call("screenshot()"))
            assert terminal["method"] == "turn/completed"
            assert "NodeReplJs" in [spec.name for spec in model.requests[0].tools]
            (result,) = [m for m in model.requests[1].messages if m.role == "tool"]
            assert [image.data_base64 for image in result.images] == [PIXEL]
            assert "was not a base64-encoded image" in result.content
            # A later turn replays the call with its image.
            await run_turn(client, thread_id, "and now?")
            (replayed,) = [m for m in model.requests[-1].messages if m.role == "tool"]
            assert [image.data_base64 for image in replayed.images] == [PIXEL]
        half = {"nodeRepl": {"backend": "desktop-node"}}  # without browserUse
        for capabilities in (None, half):
            async with sut.connect("plain", capabilities=capabilities) as client:
                thread_id = (await start_thread(client))["id"]
                await run_turn(client, thread_id, "hi")
                assert "NodeReplJs" not in [spec.name for spec in model.requests[-1].tools]


async def test_error_and_invalid_answers_fail_the_call(workspace: Path) -> None:
    answers: list[Any] = [
        {"error": "page crashed", "logs": ["before the crash"]},
        {"images": "not a list"},
    ]
    with anyio.fail_after(20):
        async with (
            running_server("websocket", workspace) as sut,
            sut.connect("desktop", capabilities=DESKTOP) as client,
        ):
            Desktop(client, lambda params: answers.pop(0))
            thread_id = (await start_thread(client))["id"]
            _, terminal = await run_turn(client, thread_id, _call("crash()"))
            assert terminal["method"] == "turn/completed"
            payload = _repl_item(terminal)
            assert payload["success"] is False
            assert payload["errorCode"] == "NodeReplError"
            assert payload["errorMessage"] == "page crashed"
            assert payload["contentItems"] == [
                {"type": "text", "text": "before the crash\nError: page crashed"}
            ]
            _, terminal = await run_turn(client, thread_id, _call("1"))
            assert "invalid answer to ext/nodeRepl/evaluate" in _repl_item(terminal)["errorMessage"]
            # No code: not sent at all.
            _, terminal = await run_turn(client, thread_id, _call("  "))
            assert _repl_item(terminal)["errorMessage"] == "NodeReplJs requires non-empty code."
            # Arguments that are not JSON: not sent either; its own item says why.
            _, terminal = await run_turn(client, thread_id, '?tool NodeReplJs {"code": "1')
            failed = _repl_item(terminal)
            assert failed["errorCode"] == "invalidArguments"
            assert "not valid JSON" in failed["errorMessage"]
            kinds = [item["type"] for item in terminal["params"]["turn"]["items"]]
            assert "toolResult" not in kinds and "toolCall" not in kinds
            # A JSON-RPC error answer.
            mark = client.mark()
            client.on_server_request = None
            turn_id = await start_turn(client, thread_id, _call("2"))
            request = await client.wait(
                lambda m: m.get("method") == "ext/nodeRepl/evaluate" and "id" in m, start=mark
            )
            await client.send(
                {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "busy"}}
            )
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            message = _repl_item(terminal)["errorMessage"]
            assert "refused ext/nodeRepl/evaluate" in message and "busy" in message


async def test_no_answer_in_time_fails_the_call_and_cancels_the_evaluation(
    workspace: Path,
) -> None:
    quick = EngineConfig(node_repl_answer_margin=0.2)
    with anyio.fail_after(20):
        async with (
            running_server("memory", workspace, engine=quick) as sut,
            sut.connect("desktop", capabilities=DESKTOP) as client,
        ):
            desktop = Desktop(client)  # never answers an evaluation
            thread_id = (await start_thread(client))["id"]
            _, terminal = await run_turn(client, thread_id, _call("hang()", timeoutSeconds=1))
            assert terminal["method"] == "turn/completed"
            payload = _repl_item(terminal)
            assert payload["success"] is False
            assert "did not answer ext/nodeRepl/evaluate within 1.2s" in payload["errorMessage"]
            (evaluate, evaluated), (cancel, cancelled) = desktop.requests
            assert (evaluate, cancel) == ("ext/nodeRepl/evaluate", "ext/nodeRepl/cancel")
            assert cancelled == {"threadId": thread_id, "evaluationId": evaluated["evaluationId"]}


async def test_interrupting_the_turn_cancels_the_evaluation(server: ServerUnderTest) -> None:
    with anyio.fail_after(20):
        async with server.connect("desktop", capabilities=DESKTOP) as client:
            desktop = Desktop(client)
            thread_id = (await start_thread(client))["id"]
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, _call("await forever()"))
            evaluate = await client.wait(
                lambda m: m.get("method") == "ext/nodeRepl/evaluate", start=mark
            )
            await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            cancel = await client.wait(lambda m: m.get("method") == "ext/nodeRepl/cancel")
            assert cancel["params"] == {
                "threadId": thread_id,
                "evaluationId": evaluate["params"]["evaluationId"],
            }
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            payload = _repl_item(terminal)
            assert payload["success"] is False
            assert payload["errorMessage"] == "Node REPL evaluation was cancelled."
            assert [method for method, _ in desktop.requests] == [
                "ext/nodeRepl/evaluate",
                "ext/nodeRepl/cancel",
            ]


def test_the_timeout_is_clamped_like_dotcrafts() -> None:
    assert [timeout_seconds(v) for v in (None, "9", True, 0, 7, 7.0, 7.5, 500)] == [
        30,
        30,
        30,
        1,
        7,
        7,
        30,
        120,
    ]


@pytest.mark.parametrize(
    "capabilities", [{"nodeRepl": "yes"}, {"browserUse": {"protocolVersion": "two"}}]
)
async def test_malformed_capabilities_are_invalid_params(
    workspace: Path, capabilities: dict[str, Any]
) -> None:
    async with (
        running_server("memory", workspace) as sut,
        sut.connect("desktop", initialize=False) as client,
    ):
        failure = await client.fail(
            "initialize",
            {"clientInfo": {"name": "d", "version": "1"}, "capabilities": capabilities},
        )
        assert failure.code == -32602
