"""The stdio doors answer their client's first line before they import anything
heavy (appserver/transport/early.py), with the same bytes as before.

Each door runs as a real process (tests/support/early.py): its first stdout
line must be byte for byte what the door itself answers once built (the door
still handles the line, and logs an error if its answer differs), and the
modules loaded when it was written must exclude pydantic, the wire models, the
runtime, the database driver and the event loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol.initialize import ClientCapabilities
from appserver.protocol.limits import MAX_NAME_CHARS
from appserver.services import handshake
from tests.support.early import INITIALIZED, built_answer, heavy_modules, initialize, run_door
from tests.support.servers import child_env


def app_server(workspace: Path, lines: list[str]) -> Any:
    argv = ["app-server", "--workspace", str(workspace), "--log-level", "warning"]
    return run_door("main", argv, lines, workspace)


def test_the_static_handshake_data_is_the_models() -> None:
    assert handshake.MAX_NAME_CHARS == MAX_NAME_CHARS
    flags = {
        field.alias or name
        for name, field in ClientCapabilities.model_fields.items()
        if field.annotation is bool
    }
    assert flags == handshake.CLIENT_FLAGS


@pytest.mark.parametrize(
    ("config", "line"),
    [
        ({}, initialize()),
        ({"Cron": {"Enabled": False}}, initialize("a-string-id")),
        (
            {},
            initialize(
                7,
                clientInfo={"name": "x", "title": "Early", "version": "2"},
                capabilities={"streamingSupport": False, "optOutNotificationMethods": ["a/b"]},
            ),
        ),
    ],
    ids=["plain", "cron-off", "capabilities"],
)
async def test_app_server_answers_initialize_early_as_a_built_server(
    config: dict[str, Any], line: str, tmp_path: Path
) -> None:
    (tmp_path / ".craft").mkdir()
    (tmp_path / ".craft" / "config.json").write_text(json.dumps(config))
    expected = await built_answer(tmp_path, line)
    list_threads = {"identity": {"channelName": "c", "userId": "u"}}
    request = json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "thread/list", "params": list_threads}
    )
    door = app_server(tmp_path, [line, INITIALIZED, request])
    assert door.stdout[0] == expected
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    assert json.loads(door.stdout[1])["id"] == 2 and "result" in door.stdout[1]
    assert len(door.stdout) == 2  # the first line was answered once
    assert "ERROR" not in door.stderr


def test_app_server_leaves_other_first_lines_to_the_router(tmp_path: Path) -> None:
    """A first line that is no plain ``initialize`` gets no early answer: the
    server answers it as it always did."""
    door = app_server(
        tmp_path,
        [
            initialize(1, clientInfo={"name": "x"}),  # no version: -32602
            initialize(2, client_info={"name": "x", "version": "1"}),  # the model's own name
        ],
    )
    assert door.modules is None
    first, second = map(json.loads, door.stdout)
    assert first["id"] == 1 and first["error"]["code"] == -32602
    assert second["id"] == 2 and "serverInfo" in second["result"]


def test_a_start_failure_still_comes_before_any_frame(tmp_path: Path) -> None:
    """A bad provider setting fails the start with one line and exit 2, and
    nothing is answered, as before the early answer (a full disk: see
    tests/storage/test_trust_full_disk.py)."""
    done = subprocess.run(
        [sys.executable, "-m", "appserver", "app-server", "--workspace", str(tmp_path)],
        input=initialize() + "\n",
        capture_output=True,
        text=True,
        env=child_env() | {"APPSERVER_PROVIDER": "gemini"},
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert "unknown provider 'gemini'" in done.stderr


def test_the_codex_face_answers_initialize_early(tmp_path: Path) -> None:
    from appserver.faces.codex import wire
    from appserver.faces.codex.handshake import initialize_result

    params = {"clientInfo": {"name": "codex_vscode", "version": "0.1"}}
    line = json.dumps({"id": 0, "method": "initialize", "params": params})
    thread_start = json.dumps({"id": 1, "method": "thread/start", "params": {}})
    door = run_door("codex_main", ["app-server"], [line, INITIALIZED, thread_start], tmp_path)
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    result = initialize_result(params, str(tmp_path.resolve()))
    assert door.stdout[0] == wire.encode(wire.response(0, result))
    assert json.loads(door.stdout[1])["id"] == 1  # thread/start, once the face is built
    assert sum('"id":0' in frame for frame in door.stdout) == 1
    assert "ERROR" not in door.stderr


def test_the_acp_face_answers_initialize_early_without_the_acp_package(tmp_path: Path) -> None:
    """The early answer is the one the face gives a second ``initialize`` itself."""
    import acp

    from appserver.faces.acp import handshake as acp_handshake

    assert acp_handshake.PROTOCOL_VERSION == acp.PROTOCOL_VERSION
    params = {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}},
        "clientInfo": {"name": "zed", "title": "Zed", "version": "1"},
    }
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}),
    ]
    door = run_door("main", ["acp", "--workspace", str(tmp_path)], lines, tmp_path)
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    assert door.stdout[0].replace('"id":0', '"id":1', 1) == door.stdout[1]
    assert len(door.stdout) == 2 and "ERROR" not in door.stderr


def test_a_bad_line_right_after_the_early_answer_gets_its_own_error(tmp_path: Path) -> None:
    """The face may refuse the second line before it answers the first: its
    answer to the first is still the one left out (it was sent twice, and the
    refusal lost)."""
    lines = [
        json.dumps(
            {"jsonrpc": "2.0", "id": "hs", "method": "initialize", "params": {"protocolVersion": 1}}
        ),
        "42",
    ]
    door = run_door("main", ["acp", "--workspace", str(tmp_path)], lines, tmp_path)
    assert door.modules is not None, "no early answer"
    frames = [json.loads(frame) for frame in door.stdout]
    assert [frame["id"] for frame in frames] == ["hs", None], frames
    assert frames[1]["error"]["code"] == -32600
    assert "ERROR" not in door.stderr


def test_the_qwen_face_answers_initialize_early(tmp_path: Path) -> None:
    """The early answer is the one the face gives a second ``initialize`` itself,
    with the session id the face then uses."""
    from appserver.faces.qwen import handshake as qwen_handshake
    from appserver.faces.qwen.session import MAX_SESSION_ID

    assert qwen_handshake.MAX_SESSION_ID == MAX_SESSION_ID
    lines = [
        json.dumps({"type": "control_request", "request_id": request_id,
                    "request": {"subtype": "initialize", "hooks": None}})
        for request_id in ("1", "2")
    ]  # fmt: skip
    flags = ["--input-format", "stream-json", "--output-format", "stream-json"]
    door = run_door("main", [*flags, "--workspace", str(tmp_path)], lines, tmp_path)
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    assert door.stdout[0].replace('"request_id":"1"', '"request_id":"2"') == door.stdout[1]
    assert "ERROR" not in door.stderr


def test_zot_answers_hello_early_when_the_model_is_known(tmp_path: Path) -> None:
    """The early ``hello`` is the one the face gives a second ``hello`` itself."""
    from appserver.providers import ProviderSettings, known_model, make_provider

    for settings in (ProviderSettings(provider="offline"),
                     ProviderSettings(provider="openai", model="m", api_key="k")):  # fmt: skip
        assert known_model(settings) == make_provider(settings).default_model
    lines = [json.dumps({"id": request_id, "type": "hello"}) for request_id in ("1", "2")]
    door = run_door("main", ["rpc", "--workspace", str(tmp_path)], lines, tmp_path)
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    assert door.stdout[0].replace('"id":"1"', '"id":"2"') == door.stdout[1]
    assert "ERROR" not in door.stderr


def test_the_router_answers_providers_list_early(tmp_path: Path) -> None:
    """The early ``providers_list`` is the one the router gives a second one
    itself (but its send time), and the first line is not answered twice."""

    def command(request_id: str) -> str:
        return json.dumps({"protocol": "codeswarm.router.v1", "type": "command",
                           "command": "providers_list", "request_id": request_id,
                           "timestamp": "2026-01-01T00:00:00Z", "payload": {}})  # fmt: skip

    lines = [command("1"), command("2")]
    door = run_door("main", ["router", "--workspace", str(tmp_path)], lines, tmp_path)
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    first, second = (json.loads(frame) for frame in door.stdout)
    assert (first["data"]["request_id"], second["data"]["request_id"]) == ("1", "2")
    del first["timestamp"], second["timestamp"]
    first["data"]["request_id"] = "2"
    assert first == second
    assert "ERROR" not in door.stderr


def test_the_router_answers_other_first_lines_itself(tmp_path: Path) -> None:
    """A first command that is not a valid ``providers_list`` (here without its
    timestamp) gets no early answer: the router rejects it as it always did."""
    line = json.dumps({"protocol": "codeswarm.router.v1", "type": "command",
                       "command": "providers_list", "request_id": "1"})  # fmt: skip
    door = run_door("main", ["router", "--workspace", str(tmp_path)], [line], tmp_path)
    assert door.modules is None
    (frame,) = map(json.loads, door.stdout)
    assert frame["event"] == "command_rejected" and "timestamp" in frame["data"]["reason"]


def test_the_early_answer_is_left_out_wherever_it_comes_and_only_it() -> None:
    from appserver.transport.early import Answered, EarlyAnswer

    answer = '{"jsonrpc":"2.0","id":"hs","result":{}}'
    refusal = '{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}'
    answered = Answered(EarlyAnswer(b"{}", answer))
    assert answered.drop([refusal]) == [refusal]  # before the answer: passed on
    assert answered.drop(["x", answer, "y"]) == ["x", "y"]
    assert answered.answer is None and answered.drop([answer]) == [answer]
    # Sent with other bytes (an error logged): still the answer to that request.
    other = Answered(EarlyAnswer(b"{}", answer))
    assert other.drop(['{"id":"hs","result":{"more":1}}']) == []
    # A door that never gives it (no JSON-RPC id): given up after its first frames.
    never = Answered(EarlyAnswer(b"{}", answer))
    frames = [f'{{"type":"event","n":{n}}}' for n in range(40)]
    assert never.drop(frames) == frames and never.answer is None
