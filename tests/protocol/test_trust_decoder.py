"""Every door parses client JSON with the same bounded decoder.

A line nested 1,000 deep or carrying a 5,000-digit integer used to kill
``appserver rpc`` and ``appserver host`` (a traceback, exit 1, turns in flight
lost). Each door now answers such a line with its own protocol's parse error
and then serves a good request: a real ``appserver`` process per door.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol.decoding import (
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    JsonRejected,
    loads_client,
)
from tests.support.line_peer import Frame, appserver_command, line_peer

DEEP = 1_000
DIGITS = 5_000


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# Bare, and inside each protocol's usual envelope fields (an object with an id),
# where a parser that survives the line still hands the value to everything after it.
HOSTILE_LINES = {
    "deep array": _nested(DEEP),
    "deep objects": '{"a":' * DEEP + "1" + "}" * DEEP,
    "deep value in an envelope": '{"id":"x","type":"ping","params":' + _nested(DEEP) + "}",
    "long integer": "7" * DIGITS,
    "long integer in an envelope": '{"id":"x","type":"ping","n":' + "7" * DIGITS + "}",
    "long negative integer": '{"n":-' + "7" * DIGITS + "}",
    # The same bounds at every door, exactly.
    "one level too deep": '{"id":"x","params":' + _nested(MAX_JSON_DEPTH) + "}",
    "one digit too long": '{"id":"x","n":' + "7" * (MAX_JSON_INT_DIGITS + 1) + "}",
}


@dataclass(frozen=True)
class Door:
    """How one front door is started, how it says "parse error", and a good request."""

    argv: Callable[[Path], list[str]]
    is_parse_error: Callable[[Frame], bool]
    good_request: Frame
    is_good_answer: Callable[[Frame], bool]


def _rpc_parse_error(frame: Frame) -> bool:
    return frame.get("id") is None and frame.get("error", {}).get("code") == -32700


DOORS: dict[str, Door] = {
    "app-server (JSON-RPC)": Door(
        argv=lambda ws: appserver_command("app-server", "--workspace", str(ws)),
        is_parse_error=_rpc_parse_error,
        good_request={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"clientInfo": {"name": "t", "version": "1"}, "capabilities": {}},
        },
        is_good_answer=lambda frame: frame.get("id") == 1 and "result" in frame,
    ),
    "rpc (zot)": Door(
        argv=lambda ws: appserver_command("rpc", "--workspace", str(ws)),
        is_parse_error=lambda frame: (
            frame["type"] == "response"
            and frame["success"] is False
            and frame["error"].startswith("malformed json:")
        ),
        good_request={"type": "ping", "id": "p1"},
        is_good_answer=lambda frame: frame.get("id") == "p1" and frame["success"] is True,
    ),
    "host (zene)": Door(
        argv=lambda ws: appserver_command(
            "host", "--workspace", str(ws), "--protocol", "v1", "--bridge-compat"
        ),
        is_parse_error=lambda frame: (
            frame["ok"] is False
            and frame["error_code"] == "INVALID_REQUEST"
            and frame["error_message"].startswith("request is not valid JSON")
        ),
        good_request={
            "protocol_version": 1,
            "type": "run",
            "request_id": "r1",
            "session_id": "s1",
            "prompt": "hello",
        },
        is_good_answer=lambda frame: frame["request_id"] == "r1" and frame["ok"] is True,
    ),
    "qwen (stream-json)": Door(
        argv=lambda ws: appserver_command(
            "--input-format", "stream-json", "--output-format", "stream-json"
        ),
        is_parse_error=lambda frame: (
            frame.get("subtype") == "input_error"
            and frame["data"]["error"].startswith("Failed to parse stream-json line")
        ),
        good_request={
            "type": "control_request",
            "request_id": "c1",
            "request": {"subtype": "initialize", "hooks": None},
        },
        is_good_answer=lambda frame: (
            frame["type"] == "control_response"
            and frame["response"]["request_id"] == "c1"
            and frame["response"]["subtype"] == "success"
        ),
    ),
    "acp": Door(
        argv=lambda ws: appserver_command("acp", "--workspace", str(ws), "--provider", "offline"),
        is_parse_error=_rpc_parse_error,
        good_request={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": 1},
        },
        is_good_answer=lambda frame: frame.get("id") == 1 and "result" in frame,
    ),
    "router (codeswarm)": Door(
        argv=lambda ws: appserver_command(
            "router", "--workspace", str(ws), "--provider", "offline"
        ),
        is_parse_error=lambda frame: (
            frame["event"] == "command_rejected"
            and frame["data"]["reason"].startswith("invalid JSON")
        ),
        good_request={
            "protocol": "codeswarm.router.v1",
            "type": "command",
            "timestamp": "2026-02-25T15:00:00Z",
            "command": "providers_list",
            "request_id": "pl1",
            "payload": {},
        },
        is_good_answer=lambda frame: (
            frame["event"] == "providers_list" and frame["data"].get("request_id") == "pl1"
        ),
    ),
}


@pytest.mark.parametrize("door", list(DOORS))
async def test_hostile_json_gets_the_protocols_parse_error_and_the_door_serves_on(
    workspace: Path, door: str
) -> None:
    spec = DOORS[door]
    stderr = workspace.parent / "stderr.log"
    async with line_peer(spec.argv(workspace), workspace, stderr) as peer:
        for name, line in HOSTILE_LINES.items():
            await peer.send(line)
            answer = await peer.frame()
            assert spec.is_parse_error(answer), (name, answer)
        await peer.send(spec.good_request)
        assert spec.is_good_answer(await peer.until(spec.is_good_answer))
        assert await peer.finish() == 0, peer.stderr()
    assert "Traceback" not in peer.stderr()


# --- the decoder itself --------------------------------------------------------------


def test_the_bounds_are_exact() -> None:
    assert loads_client(_nested(MAX_JSON_DEPTH)) == json.loads(_nested(MAX_JSON_DEPTH))
    assert loads_client("9" * MAX_JSON_INT_DIGITS) == int("9" * MAX_JSON_INT_DIGITS)
    assert loads_client("-" + "9" * MAX_JSON_INT_DIGITS) == -int("9" * MAX_JSON_INT_DIGITS)
    with pytest.raises(JsonRejected, match=f"nested deeper than {MAX_JSON_DEPTH}"):
        loads_client(_nested(MAX_JSON_DEPTH + 1))
    with pytest.raises(JsonRejected, match="1,001 digits"):
        loads_client("9" * (MAX_JSON_INT_DIGITS + 1))


@pytest.mark.parametrize(
    "text",
    [
        # Brackets and long digit runs inside strings are text, not structure.
        json.dumps({"code": "[" * 5_000, "digits": "1" * 5_000}),
        json.dumps([{"a": [1, 2, {"b": "]]]]"}]}] * 2_000),
        json.dumps({"escaped": '\\"[[[' * 500}),
    ],
)
def test_strings_are_not_counted_as_nesting_or_integers(text: str) -> None:
    assert loads_client(text) == json.loads(text)


@pytest.mark.parametrize("text", ["{", '{"a": 1', "NaN-ish", '"\\"[' + "[" * 300, "\ud800", "[1,]"])
def test_what_is_not_json_is_rejected_not_raised_otherwise(text: str) -> None:
    with pytest.raises(JsonRejected):
        loads_client(text)


def test_strict_numbers_refuse_what_json_does_not_have() -> None:
    assert loads_client("NaN") != loads_client("NaN")  # Python's default: a float nan
    for text in ("NaN", "-Infinity", "1e999", "[1e400]"):
        with pytest.raises(JsonRejected):
            loads_client(text, strict_numbers=True)
    value: Any = loads_client('{"x": 1.5e300}', strict_numbers=True)
    assert value == {"x": 1.5e300}
