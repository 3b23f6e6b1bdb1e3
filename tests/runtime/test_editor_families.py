"""An IDE's own request families (``acpExtensions.extensions``): on threads bound
to a client that lists ``_unity``, the model is offered DotCraft's Unity tools,
each call one ``ext/acp/_unity/<method>`` request; a client can declare tools of
any family it lists with ``dynamicTools[].acpMethod``; the thread's
``extensions`` narrows the families; failures fail the call, not the turn
(docs/tools.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol.acp_names import acp_method
from appserver.providers.base import ModelEvent, ModelRequest
from appserver.providers.offline import OfflineProvider
from appserver.runtime.turns import EngineConfig
from tests.support.client import RpcClient
from tests.support.helpers import start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import run_turn

UNITY = {"acpExtensions": {"extensions": ["_unity"]}}
SCENE = {
    "objects": [
        {
            "name": "Main Camera",
            "path": "/Main Camera",
            "instanceId": 42,
            "active": True,
            "components": ["Transform", "Camera"],
            "children": [],
        },
    ]
}
UNITY_TOOLS = {
    "unity_scene_query",
    "unity_get_selection",
    "unity_get_console_logs",
    "unity_get_project_info",
}


class Ide:
    """Answers ``ext/acp/<family>/*`` with ``answer(method, params)``
    (``None``: never answers)."""

    def __init__(self, client: RpcClient, answer: Any = None) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, Any]]] = []
        client.on_server_request = self._handle

    def _handle(self, method: str, params: Any) -> Any:
        self.requests.append((method, params))
        return self.answer(method, params) if self.answer is not None else None


def _call(tool: str, **arguments: Any) -> str:
    return f"?tool {tool} {json.dumps(arguments)}"


def _items(terminal: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [i["payload"] for i in terminal["params"]["turn"]["items"] if i["type"] == kind]


async def test_a_unity_tool_is_one_request_of_the_family(server: ServerUnderTest) -> None:
    with anyio.fail_after(20):
        async with server.connect("unity", capabilities=UNITY) as client:
            ide = Ide(client, lambda method, params: SCENE)
            # A declared tool of the same name is not offered: the server's own wins.
            same_name = {"name": "unity_scene_query", "description": "", "inputSchema": {}}
            thread_id = (await start_thread(client, dynamicTools=[same_name]))["id"]
            _, terminal = await run_turn(
                client, thread_id, _call("unity_scene_query", query="Cam", includeComponents=True)
            )
            assert terminal["method"] == "turn/completed"
            assert ide.requests == [
                (
                    "ext/acp/_unity/scene_query",
                    {
                        "threadId": thread_id,
                        "query": "Cam",
                        "includeComponents": True,
                        "maxDepth": 10,
                    },
                )
            ]
            # Recorded like a built-in tool (what DotCraft's ACP bridge shows the IDE).
            (call,) = _items(terminal, "toolCall")
            assert call["toolName"] == "unity_scene_query"
            (result,) = _items(terminal, "toolResult")
            assert result["success"] is True
            assert json.loads(result["result"]) == SCENE


class Recorder(OfflineProvider):
    """The offline model, keeping the tool names of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: list[set[str]] = []

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.offered.append({spec.name for spec in request.tools})
        return super().stream(request)


async def test_the_tools_go_only_to_threads_whose_client_serves_the_family(
    workspace: Path,
) -> None:
    model = Recorder()
    godot = {"acpExtensions": {"extensions": ["_godot", "_unity"]}}
    declared = {
        "namespace": "godot",
        "name": "scene_tree",
        "description": "The Godot scene tree.",
        "inputSchema": {"type": "object", "properties": {"depth": {"type": "integer"}}},
        "acpMethod": "_godot/scene_tree",
    }
    async with running_server("memory", workspace, provider=model) as sut:
        async with sut.connect("ide", capabilities=godot) as client:
            Ide(client, lambda method, params: {"error": "no scene open"})
            plain = (await start_thread(client, dynamicTools=[declared]))["id"]
            await run_turn(client, plain, "hi")
            assert UNITY_TOOLS | {"godot__scene_tree"} <= model.offered[-1]
            # The thread's `extensions` narrows the families (case does not matter).
            only_godot = {"extensions": ["_GODOT"]}
            narrowed = await start_thread(client, config=only_godot, dynamicTools=[declared])
            await run_turn(client, narrowed["id"], "hi")
            assert "godot__scene_tree" in model.offered[-1]
            assert not UNITY_TOOLS & model.offered[-1]
            none = await start_thread(client, config={"extensions": []}, dynamicTools=[declared])
            await run_turn(client, none["id"], "hi")
            assert not (UNITY_TOOLS | {"godot__scene_tree"}) & model.offered[-1]
        async with sut.connect("plain") as client:
            thread_id = (await start_thread(client))["id"]
            await run_turn(client, thread_id, "hi")
            assert not UNITY_TOOLS & model.offered[-1]
            # A declared acpMethod needs the family in the client's capabilities.
            failure = await client.fail(
                "thread/start",
                {"identity": {"channelName": "cli", "userId": "local"}, "dynamicTools": [declared]},
            )
            assert failure.code == -32602
            assert "acpMethod" in failure.message + str(failure.data)


async def test_a_declared_tool_with_an_acp_method(workspace: Path) -> None:
    declared = {
        "namespace": "godot",
        "name": "scene_tree",
        "description": "The Godot scene tree.",
        "inputSchema": {"type": "object", "properties": {"depth": {"type": "integer"}}},
        "acpMethod": "ext/acp/_godot/scene_tree",
    }
    answers: list[Any] = [{"nodes": ["Main", "Player"]}, {"error": "no scene open"}]
    with anyio.fail_after(20):
        async with (
            running_server("websocket", workspace) as sut,
            sut.connect(
                "godot", capabilities={"acpExtensions": {"extensions": ["_godot"]}}
            ) as client,
        ):
            ide = Ide(client, lambda method, params: answers.pop(0))
            thread_id = (await start_thread(client, dynamicTools=[declared]))["id"]
            call = '?tool godot__scene_tree {"depth": 2, "threadId": "another"}'
            _, terminal = await run_turn(client, thread_id, call)
            assert terminal["method"] == "turn/completed"
            assert ide.requests == [
                ("ext/acp/_godot/scene_tree", {"threadId": thread_id, "depth": 2})
            ]
            (item,) = _items(terminal, "dynamicToolCall")
            assert item["success"] is True
            assert item["structuredResult"] == {"nodes": ["Main", "Player"]}
            _, terminal = await run_turn(client, thread_id, call)
            (item,) = _items(terminal, "dynamicToolCall")
            assert item["success"] is False
            assert item["errorCode"] == "clientError"
            assert "no scene open" in item["errorMessage"]


async def test_failures_fail_the_tool_call_not_the_turn(workspace: Path) -> None:
    short = EngineConfig(approval_timeout=0.3, reconnect_grace=0.3)
    with anyio.fail_after(20):
        async with (
            running_server("memory", workspace, engine=short) as sut,
            sut.connect("unity", capabilities=UNITY) as client,
        ):
            answers: list[Any] = [{"objects": "not a list"}, {"error": "compiling"}, None]
            Ide(client, lambda method, params: answers.pop(0))
            thread_id = (await start_thread(client))["id"]
            outcomes = []
            for _ in range(3):
                _, terminal = await run_turn(client, thread_id, _call("unity_scene_query"))
                assert terminal["method"] == "turn/completed"
                (result,) = _items(terminal, "toolResult")
                assert result["success"] is False
                outcomes.append(result["result"])
            assert "invalid answer to ext/acp/_unity/scene_query" in outcomes[0]
            assert "ext/acp/_unity/scene_query failed: compiling" in outcomes[1]
            assert "did not answer ext/acp/_unity/scene_query within 0.3s" in outcomes[2]
            # Bad arguments are refused before anything is sent.
            _, terminal = await run_turn(
                client, thread_id, _call("unity_scene_query", maxDepth="9")
            )
            (result,) = _items(terminal, "toolResult")
            assert result["result"] == "Error: `maxDepth` must be a whole number"


@pytest.mark.parametrize(
    ("declared", "normalised"),
    [("_unity/scene_query", "_unity/scene_query"), ("ext/acp/_x/a/b", "_x/a/b")],
)
def test_an_acp_method_names_a_custom_family(declared: str, normalised: str) -> None:
    assert acp_method(declared) == normalised
    for bad in ("fs/readTextFile", "_unity", "unity/scene_query", "_u/a b"):
        with pytest.raises(ValueError, match="custom ACP family"):
            acp_method(bad)
