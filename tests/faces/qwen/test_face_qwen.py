"""Qwen Code's structured I/O (``appserver --input-format stream-json ...``),
driven as a real subprocess.

The frames sent are those ``@qwen-code/sdk`` 0.1.14 writes (its ``Query`` and
``ProcessTransport``: ``initialize`` first, ``user`` messages, ``control_response``
answers to ``can_use_tool``); its command line is built as the SDK builds it.
Every stdout line of every run is checked to be one message of the protocol,
with the fields the SDK's type guards require. The SDK itself drives the face
in ``tests/qwen_sdk`` (``node --test``).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from tests.support.json_lines import JsonLinesProcess, piped_process
from tests.support.processes import ws_client
from tests.support.servers import child_env, read_listening_url
from tests.support.turns import watched_turn

TIMEOUT = 20.0
SLOW = "?stream 1000\n?delay 20"  # ~20 s of text unless interrupted
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SDK_ARGS = ["--input-format", "stream-json", "--output-format", "stream-json", "--channel=SDK"]
INIT_FIELDS = {
    "type",
    "subtype",
    "uuid",
    "session_id",
    "parent_tool_use_id",
    "cwd",
    "tools",
    "mcp_servers",
    "model",
    "permission_mode",
    "slash_commands",
    "qwen_code_version",
    "agents",
}
RESULT_FIELDS = {
    "type",
    "subtype",
    "uuid",
    "session_id",
    "is_error",
    "duration_ms",
    "duration_api_ms",
    "num_turns",
    "usage",
    "permission_denials",
}
ENVELOPE = {"type", "uuid", "session_id", "parent_tool_use_id"}

Frame = dict[str, Any]


# --- frame checks ---------------------------------------------------------------------


def check_block(block: Frame) -> None:
    kind = block["type"]
    if kind == "text":
        assert set(block) == {"type", "text"} and isinstance(block["text"], str), block
    elif kind == "thinking":
        assert set(block) == {"type", "thinking"} and isinstance(block["thinking"], str), block
    elif kind == "tool_use":
        assert set(block) == {"type", "id", "name", "input"}, block
        assert isinstance(block["input"], dict), block
    else:
        raise AssertionError(f"unexpected block {block}")


def check_frame(line: bytes) -> Frame:
    """One stdout line: one stream-json message, with the SDK guards' fields."""
    frame = json.loads(line)
    assert isinstance(frame, dict), line
    kind = frame["type"]
    if kind == "control_response":
        assert set(frame) == {"type", "response"}, frame
        response = frame["response"]
        assert isinstance(response["request_id"], str) and response["request_id"], frame
        if response["subtype"] == "success":
            assert set(response) == {"subtype", "request_id", "response"}, frame
            assert isinstance(response["response"], dict), frame
        else:
            assert response["subtype"] == "error", frame
            assert set(response) == {"subtype", "request_id", "error"}, frame
            assert isinstance(response["error"], str) and response["error"], frame
    elif kind == "control_request":
        assert set(frame) == {"type", "request_id", "request"}, frame
        request = frame["request"]
        assert set(request) == {
            "subtype",
            "tool_name",
            "tool_use_id",
            "input",
            "permission_suggestions",
            "blocked_path",
        }, frame
        assert request["subtype"] == "can_use_tool", frame
    elif kind == "system":
        assert ENVELOPE | {"subtype"} <= set(frame), frame
        if frame["subtype"] == "init":
            assert set(frame) == INIT_FIELDS, frame
        else:
            assert frame["subtype"] == "input_error", frame
            assert set(frame) == ENVELOPE | {"subtype", "data"}, frame
            assert isinstance(frame["data"]["error"], str), frame
    elif kind == "assistant":
        assert set(frame) == ENVELOPE | {"message"}, frame
        message = frame["message"]
        assert set(message) == {"id", "type", "role", "model", "content", "stop_reason", "usage"}
        assert message["id"] == frame["uuid"] and message["role"] == "assistant", frame
        assert len({block["type"] for block in message["content"]}) == 1, frame
        for block in message["content"]:
            check_block(block)
        tools = message["content"][0]["type"] == "tool_use"
        assert message["stop_reason"] == ("tool_use" if tools else None), frame
        assert set(message["usage"]) == {"input_tokens", "output_tokens"}, frame
    elif kind == "user":
        assert set(frame) == ENVELOPE | {"message"}, frame
        (block,) = frame["message"]["content"]
        assert set(block) == {"type", "tool_use_id", "is_error", "content"}, frame
        assert block["type"] == "tool_result" and isinstance(block["content"], str), frame
    elif kind == "stream_event":
        assert set(frame) == ENVELOPE | {"event"}, frame
        assert frame["event"]["type"] in (
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_stop",
        ), frame
    elif kind == "result":
        extra = {"result"} if frame["subtype"] == "success" else {"error"}
        assert set(frame) == RESULT_FIELDS | extra, frame
        assert frame["is_error"] is (frame["subtype"] != "success"), frame
        assert frame["subtype"] in ("success", "error_during_execution", "error_max_turns")
        assert set(frame["usage"]) == {
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "cache_read_input_tokens",
        }, frame
        for key in ("duration_ms", "duration_api_ms", "num_turns"):
            assert isinstance(frame[key], int) and frame[key] >= 0, frame
    else:
        raise AssertionError(f"unexpected message {frame}")
    return frame


# --- the process ------------------------------------------------------------------------


class Qwen(JsonLinesProcess):
    """One face process, read line by line."""

    separators = (",", ":")  # as the SDK writes

    def __init__(self, process: Process, check: Callable[[bytes], Frame] = check_frame) -> None:
        super().__init__(process, check, TIMEOUT)

    async def result(self) -> list[Frame]:
        return await self.until(lambda f: f["type"] == "result")

    async def control(self, subtype: str, **fields: Any) -> Frame:
        """Send a control request as the SDK does; its response body."""
        request_id = str(uuid.uuid4())
        await self.send(
            {
                "type": "control_request",
                "request_id": request_id,
                "request": {"subtype": subtype, **fields},
            }
        )
        frames = await self.until(
            lambda f: f["type"] == "control_response" and f["response"]["request_id"] == request_id
        )
        response: Frame = frames[-1]["response"]
        return response

    async def initialize(self) -> Frame:
        response = await self.control("initialize", hooks=None)
        assert response["subtype"] == "success", response
        body: Frame = response["response"]
        return body

    async def prompt(self, content: Any, session_id: str = "") -> None:
        await self.send(
            {
                "type": "user",
                "session_id": session_id,
                "message": {"role": "user", "content": content},
                "parent_tool_use_id": None,
            }
        )


def qwen_env() -> dict[str, str]:
    env = child_env()
    env.pop("APPSERVER_PROVIDER", None)
    env.pop("APPSERVER_MODEL", None)
    return env


@asynccontextmanager
async def qwen(
    workspace: Path,
    *flags: str,
    base: list[str] | None = None,
    stderr: Any = None,
    check: Callable[[bytes], Frame] = check_frame,
) -> AsyncIterator[Qwen]:
    argv = [sys.executable, "-m", "appserver", *(SDK_ARGS if base is None else base), *flags]
    async with piped_process(
        argv, workspace, qwen_env(), workspace.parent / "stderr.log", stderr, TIMEOUT
    ) as process:
        yield Qwen(process, check)


async def run_once(
    workspace: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(TIMEOUT):
        return await anyio.run_process(
            [sys.executable, "-m", "appserver", *args],
            input=stdin,
            env=qwen_env(),
            cwd=workspace,
            check=False,
        )


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def texts(frames: list[Frame]) -> list[str]:
    return [
        block["text"]
        for frame in of(frames, "assistant")
        for block in frame["message"]["content"]
        if block["type"] == "text"
    ]


def tool_results(frames: list[Frame]) -> list[Frame]:
    return [block for frame in of(frames, "user") for block in frame["message"]["content"]]


def types(frames: list[Frame]) -> list[str]:
    out = []
    for frame in frames:
        kind = frame["type"]
        if kind == "stream_event":
            kind = frame["event"]["type"]
            if kind in ("content_block_start", "content_block_delta"):
                block = frame["event"].get("content_block") or frame["event"]["delta"]
                kind = f"{kind}:{block['type']}"
        out.append(kind)
    return out


def answer(request: Frame, **response: Any) -> Frame:
    """The SDK's control_response to a can_use_tool request."""
    return {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": request["request_id"],
            "response": response,
        },
    }


# --- the SDK's session -------------------------------------------------------------------


async def test_sdk_handshake_and_a_plain_turn(workspace: Path) -> None:
    session_id = str(uuid.uuid4())
    async with qwen(workspace, "--session-id", session_id) as proc:
        init = await proc.initialize()
        assert init == {
            "subtype": "initialize",
            "session_id": session_id,
            "capabilities": {
                "can_handle_can_use_tool": True,
                "can_handle_hook_callback": False,
                "can_set_permission_mode": True,
                "can_set_model": True,
                "can_set_effort": False,
                "can_get_context_usage": False,
                "can_get_available_models": True,
                "can_get_usage_info": False,
                "can_handle_mcp_message": False,
            },
        }
        await proc.prompt("hello there", session_id)
        frames = await proc.result()
        assert types(frames) == ["system", "assistant", "result"]
        system, assistant, result = frames
        assert system["subtype"] == "init" and system["session_id"] == session_id
        assert system["cwd"] == str(workspace.resolve())
        assert system["tools"] == [
            "shell",
            "read_file",
            "list_dir",
            "grep",
            "find_files",
            "write_file",
            "edit_file",
            "apply_patch",
            "view_image",
            "web_fetch",
            "CreatePlan",
            "UpdateTodos",
            # The agent-control tools (child threads, docs/subagents.md).
            "SpawnAgent",
            "SendInput",
            "WaitAgent",
            "ResumeAgent",
            "CloseAgent",
        ]
        assert system["model"] == "offline" and system["permission_mode"] == "default"
        assert system["slash_commands"] == ["compress"] and system["mcp_servers"] == []
        assert system["qwen_code_version"].startswith("appserver ")
        message = assistant["message"]
        assert message["content"] == [{"type": "text", "text": "You said: hello there"}]
        assert message["model"] == "offline"
        assert message["usage"]["input_tokens"] > 0 and message["usage"]["output_tokens"] == 4
        assert result["subtype"] == "success" and result["is_error"] is False
        assert result["result"] == "You said: hello there"
        assert result["num_turns"] == 1 and result["permission_denials"] == []
        assert result["usage"]["input_tokens"] == message["usage"]["input_tokens"]
        assert result["usage"]["total_tokens"] == result["usage"]["input_tokens"] + 4
        assert result["session_id"] == session_id
        assert result["duration_ms"] >= result["duration_api_ms"]
        # A second message is a second turn of the same conversation.
        await proc.prompt([{"type": "text", "text": "and"}, {"type": "text", "text": "again"}])
        frames = await proc.result()
        assert texts(frames) == ["You said: and again"]
        assert frames[-1]["usage"]["input_tokens"] > result["usage"]["input_tokens"] + 5
        rest, code = await proc.finish()
        assert rest == [] and code == 0


async def test_partial_messages_stream_anthropic_style_events(workspace: Path) -> None:
    async with qwen(workspace, "--include-partial-messages", "--approval-mode", "yolo") as proc:
        await proc.prompt("?think let me see\nhello")
        frames = await proc.result()
        assert types(frames) == [
            "system",
            "message_start",
            "content_block_start:thinking",
            *["content_block_delta:thinking_delta"] * 3,
            "content_block_stop",
            "assistant",
            "content_block_start:text",
            *["content_block_delta:text_delta"] * 3,
            "content_block_stop",
            "assistant",
            "message_stop",
            "result",
        ]
        events = [f["event"] for f in of(frames, "stream_event")]
        start = events[0]["message"]
        assert start["role"] == "assistant" and start["model"] == "offline"
        assert start["id"] == of(frames, "assistant")[0]["uuid"]
        # Block indexes count within each assistant message.
        assert [e.get("index") for e in events if "index" in e] == [0] * 10
        thinking, text = of(frames, "assistant")
        assert thinking["message"]["content"] == [{"type": "thinking", "thinking": "let me see"}]
        assert thinking["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
        assert text["message"]["usage"]["output_tokens"] > 0  # the call's usage: its last message
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert "".join(d["thinking"] for d in deltas[:3]) == "let me see"
        assert "".join(d["text"] for d in deltas[3:]) == "You said: hello"

        await proc.prompt("!echo hi")
        frames = await proc.result()
        assert types(frames) == [
            "system",
            "message_start",
            "content_block_start:tool_use",
            "content_block_delta:input_json_delta",
            "content_block_stop",
            "assistant",
            "message_stop",
            "user",
            "message_start",
            "content_block_start:text",
            *["content_block_delta:text_delta"] * 6,
            "content_block_stop",
            "assistant",
            "message_stop",
            "result",
        ]
        tool_start = frames[2]["event"]["content_block"]
        assert tool_start == {
            "type": "tool_use",
            "id": "offline_call_1",
            "name": "shell",
            "input": {},
        }
        assert frames[3]["event"]["delta"]["partial_json"] == '{"command":"echo hi"}'
        assert frames[-1]["num_turns"] == 2


# --- approvals ---------------------------------------------------------------------------


async def test_can_use_tool_allow_runs_the_call(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        await proc.initialize()
        await proc.prompt("!touch allowed.txt")
        frames = await proc.until(lambda f: f["type"] == "control_request")
        # The tool_use is on the stream before the question about it.
        assert types(frames) == ["system", "assistant", "control_request"]
        tool_use = frames[1]["message"]["content"][0]
        request = frames[-1]
        assert request["request"] == {
            "subtype": "can_use_tool",
            "tool_name": "shell",
            "tool_use_id": tool_use["id"],
            "input": {"command": "touch allowed.txt"},
            "permission_suggestions": None,
            "blocked_path": None,
        }
        await proc.send(answer(request, behavior="allow", updatedInput=request["request"]["input"]))
        frames = await proc.result()
        assert types(frames) == ["user", "assistant", "result"]
        (result_block,) = tool_results(frames)
        assert result_block["tool_use_id"] == tool_use["id"] and result_block["is_error"] is False
        assert (workspace / "allowed.txt").exists()
        assert frames[-1]["result"] == "The command exited with code 0."
        assert frames[-1]["num_turns"] == 2 and frames[-1]["permission_denials"] == []


async def test_can_use_tool_deny_error_and_changed_input_decline(workspace: Path) -> None:
    answers: list[Callable[[Frame], Frame]] = [
        lambda r: answer(r, behavior="deny", message="Denied"),
        lambda r: {
            "type": "control_response",
            "response": {
                "subtype": "error",
                "request_id": r["request_id"],
                "error": "callback threw",
            },
        },
        lambda r: answer(r, behavior="allow", updatedInput={"command": "touch other.txt"}),
    ]
    async with qwen(workspace) as proc:
        for index, reply in enumerate(answers):
            await proc.prompt(f"!touch denied{index}.txt")
            (request,) = of(
                await proc.until(lambda f: f["type"] == "control_request"), "control_request"
            )
            await proc.send(reply(request))
            frames = await proc.result()
            (block,) = tool_results(frames)
            assert block["is_error"] is True and block["content"].startswith("Declined"), block
            result = frames[-1]
            assert result["result"] == "The shell call was declined."
            assert result["permission_denials"] == [
                {
                    "tool_name": "shell",
                    "tool_use_id": block["tool_use_id"],
                    "tool_input": {"command": f"touch denied{index}.txt"},
                }
            ]
        assert not list(workspace.glob("*.txt"))


async def test_deny_with_interrupt_cancels_the_turn(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        await proc.prompt("!touch never.txt")
        (request,) = of(
            await proc.until(lambda f: f["type"] == "control_request"), "control_request"
        )
        await proc.send(answer(request, behavior="deny", message="stop", interrupt=True))
        frames = await proc.result()
        result = frames[-1]
        assert result["subtype"] == "error_during_execution" and result["is_error"] is True
        assert result["error"] == {"message": "Operation cancelled.", "reason": "approvalCancelled"}
        (block,) = tool_results(frames)  # the open tool use is closed
        assert block["is_error"] is True and block["content"] == "Operation cancelled."
        assert not (workspace / "never.txt").exists()


async def test_stdin_closing_declines_a_pending_question(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        await proc.prompt("!touch late.txt")
        await proc.until(lambda f: f["type"] == "control_request")
        rest, code = await proc.finish()
        assert code == 0
        assert rest[-1]["type"] == "result" and rest[-1]["result"] == "The shell call was declined."
        assert not (workspace / "late.txt").exists()


async def test_approval_modes_and_set_permission_mode(workspace: Path) -> None:
    async with qwen(workspace, "--approval-mode", "plan") as proc:
        await proc.prompt("!touch planned.txt")
        frames = await proc.result()
        assert "control_request" not in types(frames)
        assert frames[0]["permission_mode"] == "plan"
        assert frames[-1]["result"] == "The shell call was declined."
        assert len(frames[-1]["permission_denials"]) == 1
        # auto-edit: file writes and edits run, shell commands are asked.
        response = await proc.control("set_permission_mode", mode="auto-edit")
        assert response["response"] == {"status": "updated", "mode": "auto-edit"}
        await proc.prompt(">notes.txt\nhello")
        frames = await proc.result()
        assert "control_request" not in types(frames)
        assert frames[0]["permission_mode"] == "auto-edit"
        assert (workspace / "notes.txt").read_text() == "hello\n"
        await proc.prompt("!touch asked.txt")
        (request,) = of(
            await proc.until(lambda f: f["type"] == "control_request"), "control_request"
        )
        await proc.send(answer(request, behavior="deny", message="no"))
        await proc.result()
        # yolo: nothing is asked in the workspace.
        await proc.control("set_permission_mode", mode="yolo")
        await proc.prompt("!touch yolo.txt")
        frames = await proc.result()
        assert "control_request" not in types(frames)
        assert (workspace / "yolo.txt").exists() and not (workspace / "asked.txt").exists()
        bad = await proc.control("set_permission_mode", mode="reckless")
        assert bad["subtype"] == "error" and "Invalid permission mode: reckless" in bad["error"]


async def test_tool_flags_allow_exclude_and_restrict(workspace: Path) -> None:
    flags = [
        "--allowed-tools",
        "Bash(echo *)",
        "--exclude-tools",
        "Bash(rm *),edit",
        "--core-tools",
        "run_shell_command,read_file,write_file,edit,web_fetch",
    ]
    async with qwen(workspace, *flags) as proc:
        await proc.prompt("!echo allowed")
        frames = await proc.result()
        assert frames[0]["tools"] == ["shell", "read_file", "write_file"]
        assert "control_request" not in types(frames)
        assert tool_results(frames)[0]["content"] == "exit code: 0\nallowed\n"
        (workspace / "keep.txt").write_text("x")
        await proc.prompt("!rm keep.txt")
        frames = await proc.result()
        assert "control_request" not in types(frames)
        assert (workspace / "keep.txt").exists()
        assert frames[-1]["result"] == "The shell call was declined."
        # Yolo still refuses what --exclude-tools names.
        await proc.control("set_permission_mode", mode="yolo")
        await proc.prompt("!rm keep.txt")
        frames = await proc.result()
        assert (workspace / "keep.txt").exists()
        await proc.prompt("!touch yolo.txt")
        await proc.result()
        assert (workspace / "yolo.txt").exists()


# --- interrupts, queueing, failures -------------------------------------------------------------


async def test_interrupt_mid_stream(workspace: Path) -> None:
    async with qwen(workspace, "--include-partial-messages") as proc:
        idle = await proc.control("interrupt")  # nothing running: fine
        assert idle["response"] == {"subtype": "interrupt"}
        await proc.prompt(SLOW)
        await proc.until(
            lambda f: f["type"] == "stream_event" and f["event"]["type"] == "content_block_delta"
        )
        with anyio.fail_after(5):
            response = await proc.control("interrupt")
            frames = await proc.result()
        assert response["subtype"] == "success"
        result = frames[-1]
        assert result["subtype"] == "error_during_execution"
        assert result["error"] == {"message": "Operation cancelled."}
        said = "".join(texts(proc.frames))
        assert said.startswith("chunk 1 ") and "chunk 1000" not in said
        assert types(frames)[-3:] == ["assistant", "message_stop", "result"]
        # The session goes on.
        await proc.prompt("still there?")
        assert texts(await proc.result()) == ["You said: still there?"]


async def test_an_interrupt_written_right_behind_its_message_cancels_it(workspace: Path) -> None:
    """Both lines in one write, as an SDK that sends and interrupts at once does: the
    interrupt is the message's even before the session takes it up (it was lost then,
    and the turn ran to its end)."""
    async with qwen(workspace) as proc:
        await proc.control("interrupt")  # started and idle
        message = {
            "type": "user",
            "session_id": "",
            "message": {"role": "user", "content": SLOW},
            "parent_tool_use_id": None,
        }
        interrupt = {
            "type": "control_request",
            "request_id": "stop",
            "request": {"subtype": "interrupt"},
        }
        lines = (json.dumps(frame).encode() + b"\n" for frame in (message, interrupt))
        await proc.send(b"".join(lines))
        with anyio.fail_after(5):
            result = (await proc.result())[-1]
        assert result["subtype"] == "error_during_execution"
        assert result["error"] == {"message": "Operation cancelled."}
        await proc.prompt("still there?")
        assert texts(await proc.result()) == ["You said: still there?"]


async def test_messages_queue_and_stdin_closing_finishes_them(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        await proc.prompt("?stream 3\n?delay 50")
        await proc.prompt("second")
        await proc.prompt("third")
        rest, code = await proc.finish()
        assert code == 0
        results = of(rest, "result")
        assert [r["result"] for r in results] == [
            "chunk 1 chunk 2 chunk 3 ",
            "You said: second",
            "You said: third",
        ]
        assert [r["usage"]["input_tokens"] for r in results] == sorted(
            r["usage"]["input_tokens"] for r in results
        )


async def test_failures_and_the_model_call_limit(workspace: Path) -> None:
    async with qwen(workspace, "--max-session-turns", "1", "--yolo") as proc:
        await proc.prompt("?fail auth bad key")
        result = (await proc.result())[-1]
        assert result["subtype"] == "error_during_execution"
        assert "bad key" in result["error"]["message"]
        assert result["error"]["code"] == "provider_auth"
        await proc.prompt("!echo one call is not enough")
        result = (await proc.result())[-1]
        assert result["subtype"] == "error_max_turns"
        assert result["error"]["code"] == "max_model_calls"
        await proc.prompt("   ")
        result = (await proc.result())[-1]
        assert result["error"]["message"] == "the user message has no content"
        assert result["num_turns"] == 0


# --- control requests and bad input -------------------------------------------------------------


async def test_control_requests(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        models = await proc.control("get_available_models")
        assert models["response"] == {
            "subtype": "get_available_models",
            "models": [{"id": "offline", "label": "offline", "contextWindowSize": 128000}],
        }
        ok = await proc.control("set_model", model="offline")
        assert ok["response"] == {"subtype": "set_model", "model": "offline"}
        unknown = await proc.control("set_model", model="qwen3-coder-plus")
        assert unknown["subtype"] == "error" and "qwen3-coder-plus" in unknown["error"]
        missing = await proc.control("set_model")
        assert missing["error"] == "Invalid model specified for set_model request"
        commands = await proc.control("supported_commands")
        assert commands["response"] == {"subtype": "supported_commands", "commands": ["compress"]}
        status = await proc.control("mcp_server_status")
        assert status["response"] == {"subtype": "mcp_server_status", "status": {}}
        resume = await proc.control("continue_last_turn")
        assert resume["response"]["accepted"] is False
        for subtype, fields in (
            ("get_context_usage", {"show_details": False}),
            ("set_effort", {"effort": "high"}),
            ("get_usage_info", {}),
            ("hook_callback", {"callback_id": "x", "input": {}, "tool_use_id": None}),
            ("no_such_thing", {}),
        ):
            refused = await proc.control(subtype, **fields)
            assert refused == {
                "subtype": "error",
                "request_id": refused["request_id"],
                "error": f"Unknown control request subtype: {subtype}",
            }
        await proc.send({"type": "control_request", "request_id": "r1", "request": {}})
        (bad,) = of(await proc.until(lambda f: f["type"] == "control_response"), "control_response")
        assert bad["response"]["request_id"] == "r1" and bad["response"]["subtype"] == "error"
        # Control requests are answered while a turn runs.
        await proc.prompt("?stream 20\n?delay 20")
        assert (await proc.control("supported_commands"))["subtype"] == "success"
        assert of(await proc.result(), "result")[0]["result"].startswith("chunk 1 ")


async def test_bad_input_is_reported_and_never_fatal(workspace: Path) -> None:
    bad_lines: list[bytes | str | Frame] = [
        "{not json",
        "[1,2]",
        '"text"',
        {"no": "type"},
        {"type": 7},
        {"type": "user"},
        {"type": "user", "message": {"role": "user", "content": 5}},
        {"type": "user", "message": {"role": "user", "content": ["x"]}},
        {
            "type": "user",
            "message": {"content": [{"type": "image", "source": {"type": "base64", "data": "!!"}}]},
        },
        {
            "type": "user",
            "message": {
                "content": [{"type": "image", "source": {"type": "base64", "data": "aGVsbG8="}}]
            },
        },
        {"type": "control_request", "request": {"subtype": "interrupt"}},
        {"type": "mystery"},
        b"\xff\xfe not utf-8\n",
    ]
    async with qwen(workspace) as proc:
        for line in bad_lines:
            await proc.send(line)
            frame = await proc.next()
            assert frame["type"] == "system" and frame["subtype"] == "input_error", (line, frame)
        # Ignored without a word: messages the CLI writes, answers nobody waits for.
        for quiet in (
            {"type": "assistant", "message": {}},
            {"type": "result", "subtype": "success"},
            {"type": "control_cancel_request", "request_id": "x"},
            {"type": "control_response", "response": {"subtype": "success", "request_id": "nope"}},
            "",
            "   ",
        ):
            await proc.send(quiet)
        await proc.send(b"x" * (16 * 1024 * 1024 + 10) + b"\n")
        frame = await proc.next()
        assert frame["subtype"] == "input_error" and "too long" in frame["data"]["error"]
        await proc.prompt("still fine")
        frames = await proc.result()
        assert texts(frames) == ["You said: still fine"]
        rest, code = await proc.finish()
        assert rest == [] and code == 0


async def test_images_and_other_blocks(workspace: Path) -> None:
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(PNG).decode(),
        },
    }
    async with qwen(workspace) as proc:
        await proc.prompt([{"type": "text", "text": "look"}, image])
        assert texts(await proc.result()) == ["You said: look [1 image attached]"]
        assert len(list((workspace / ".craft" / "attachments" / "images").glob("*.png"))) == 1
        await proc.prompt([{"type": "tool_result", "tool_use_id": "t", "content": "x"}])
        said = texts(await proc.result())[0]
        assert said.startswith('You said: {"type": "tool_result"')


async def test_compress_slash_command(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        await proc.prompt("/compress")
        result = (await proc.result())[-1]
        assert result["result"] == "Nothing to compress." and result["is_error"] is False
        await proc.prompt("remember the word apple")
        await proc.result()
        await proc.prompt("/compress")
        result = (await proc.result())[-1]
        assert result["subtype"] == "success" and "apple" in result["result"]


# --- sessions ---------------------------------------------------------------------------------


async def test_sessions_resume_continue_and_errors(workspace: Path) -> None:
    session_id = str(uuid.uuid4())
    async with qwen(workspace, "--session-id", session_id) as proc:
        await proc.prompt("remember the word apple")
        first = (await proc.result())[-1]
        await proc.finish()
    async with qwen(workspace) as proc:
        await proc.prompt("which word?")
        fresh = (await proc.result())[-1]
        assert fresh["session_id"] != session_id
        await proc.finish()
    async with qwen(workspace, "--resume", session_id) as proc:
        init = await proc.initialize()
        assert init["session_id"] == session_id
        await proc.prompt("which word?")
        resumed = (await proc.result())[-1]
        assert resumed["session_id"] == session_id
        # The model saw the first process's turn.
        assert resumed["usage"]["input_tokens"] > fresh["usage"]["input_tokens"] + 5
        await proc.finish()
    # --continue: the most recent qwen session of the workspace (the resumed one).
    async with qwen(workspace, "--continue") as proc:
        await proc.prompt("again")
        again = (await proc.result())[-1]
        assert again["session_id"] == session_id
        assert again["usage"]["input_tokens"] > resumed["usage"]["input_tokens"]
        await proc.finish()
    # --session-id of an existing session goes on with it too.
    async with qwen(workspace, "--session-id", session_id) as proc:
        await proc.prompt("once more")
        assert (await proc.result())[-1]["usage"]["input_tokens"] > again["usage"]["input_tokens"]
        await proc.finish()
    assert first["session_id"] == session_id
    unknown = await run_once(workspace, *SDK_ARGS, "--resume", str(uuid.uuid4()))
    assert unknown.returncode == 1 and unknown.stdout == b""
    assert b"No saved session found with ID" in unknown.stderr
    fork = await run_once(workspace, *SDK_ARGS, "--resume", session_id, "--fork-session")
    assert fork.returncode == 2 and b"--fork-session" in fork.stderr
    bad = await run_once(workspace, *SDK_ARGS, "--session-id", "x" * 300)
    assert bad.returncode == 1 and b"Invalid session id" in bad.stderr


async def test_the_sdk_command_line_with_every_option(workspace: Path, tmp_path: Path) -> None:
    """ProcessTransport.buildCliArguments with every option set, plus an unknown flag."""
    flags = [
        "--model", "offline",
        "--system-prompt", "You are terse.",
        "--append-system-prompt", "Mind the tests.",
        "--approval-mode", "auto-edit",
        "--max-session-turns", "5",
        "--core-tools", "read_file,edit,write_file,run_shell_command",
        "--exclude-tools", "Bash(rm *)",
        "--allowed-tools", "Read,Bash(git status)",
        "--auth-type", "qwen-oauth",
        "--include-partial-messages",
        "--session-id", str(uuid.uuid4()),
        "--max-tool-calls", "10",
        "--max-subagent-depth", "3",
        "--include-directories", str(tmp_path),
        "--extensions", "a,b",
        "--allowed-mcp-server-names", "x",
        "--fallback-model", "qwen-plus",
        "--proxy", "http://127.0.0.1:9",
        "--sandbox",
        "--safe-mode",
        "--insecure",
        "--worktree",
        "--disabled-slash-commands", "clear",
        "--some-future-flag",
    ]  # fmt: skip
    async with qwen(workspace, *flags, stderr=subprocess.PIPE) as proc:
        await proc.initialize()
        await proc.prompt(">made.txt\nby auto-edit")
        frames = await proc.result()
        assert frames[0]["permission_mode"] == "auto-edit"
        assert frames[0]["tools"] == ["shell", "read_file", "write_file", "edit_file"]
        assert (workspace / "made.txt").exists()
        _, code = await proc.finish()
        assert code == 0
        assert proc.process.stderr is not None
        stderr = await proc.process.stderr.receive()
        assert b"ignoring unsupported options: --some-future-flag" in stderr


# --- other formats ------------------------------------------------------------------------------


async def test_output_format_json(workspace: Path) -> None:
    done = await run_once(
        workspace, "--output-format", "json", "--approval-mode", "yolo", stdin=b"!echo hi\n"
    )
    assert done.returncode == 0
    (line,) = done.stdout.decode().splitlines()
    messages = json.loads(line)
    for message in messages:
        check_frame(json.dumps(message).encode())
    assert [m["type"] for m in messages] == ["system", "assistant", "user", "assistant", "result"]
    assert messages[-1]["result"] == "The command exited with code 0."
    failed = await run_once(
        workspace, "-o", "json", "--input-format", "text", stdin=b"?fail other boom"
    )
    assert failed.returncode == 1
    assert json.loads(failed.stdout)[-1]["error"]["message"].endswith("boom")


async def test_input_format_text(workspace: Path) -> None:
    done = await run_once(
        workspace, "--input-format", "text", "--output-format", "text", stdin=b"hello\n"
    )
    assert (done.returncode, done.stdout) == (0, b"You said: hello\n")
    prompted = await run_once(
        workspace, "--output-format", "text", "-p", "and this", stdin=b"first"
    )
    assert prompted.stdout == b"You said: first and this\n"
    only_flag = await run_once(workspace, "--output-format", "text", "--prompt", "just this")
    assert only_flag.stdout == b"You said: just this\n"
    empty = await run_once(workspace, "--input-format", "text", "--output-format", "text")
    assert empty.returncode == 1 and b"No input provided" in empty.stderr
    # All of it: a pipe's one read gives 64 KiB (it was cut there).
    long = b"word " * 40_000
    whole = await run_once(
        workspace, "--input-format", "text", "--output-format", "text", stdin=long
    )
    assert (whole.returncode, whole.stdout) == (0, b"You said: " + long.strip() + b"\n")
    failed = await run_once(workspace, "--output-format", "text", stdin=b"?fail auth bad key")
    assert failed.returncode == 1 and failed.stdout == b"" and b"bad key" in failed.stderr
    streamed = await run_once(workspace, "--output-format", "stream-json", stdin=b"hi\n")
    lines = [check_frame(line) for line in streamed.stdout.splitlines()]
    assert [f["type"] for f in lines] == ["system", "assistant", "result"]


def check_chunk(line: bytes) -> Frame:
    frame = json.loads(line)
    assert isinstance(frame, dict), line
    if frame.get("type") in ("control_request", "control_response"):
        return check_frame(line)
    if "error" in frame:
        assert set(frame["error"]) == {"message", "type", "code"}, frame
        return frame
    assert {"id", "object", "created", "model", "choices"} <= set(frame), frame
    assert frame["object"] == "chat.completion.chunk" and frame["id"].startswith("chatcmpl-")
    (choice,) = frame["choices"]
    assert set(choice) == {"index", "delta", "finish_reason"}, frame
    return frame


async def test_output_format_stream_chunk_json(workspace: Path) -> None:
    base = ["--input-format", "stream-json", "--output-format", "stream-chunk-json"]
    async with qwen(workspace, base=base, check=check_chunk) as proc:
        await proc.prompt("?think hmm\n!echo hi")
        request = (await proc.until(lambda f: f.get("type") == "control_request"))[-1]
        await proc.send(answer(request, behavior="allow", updatedInput=request["request"]["input"]))
        frames = await proc.until(lambda f: "choices" in f and f["choices"][0]["finish_reason"])
        chunks = [f for f in proc.frames if "choices" in f]
        deltas = [c["choices"][0]["delta"] for c in chunks]
        assert deltas[0] == {"role": "assistant"}
        meta = chunks[0]["metadata"]
        assert meta["output_format"] == "stream-chunk-json" and meta["protocol_version"] == 1
        assert "".join(d.get("reasoning_content", "") for d in deltas) == "hmm"
        calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
        assert calls[0] == {
            "index": 0,
            "id": "offline_call_1",
            "type": "function",
            "function": {"name": "shell", "arguments": ""},
        }
        assert calls[1] == {"index": 0, "function": {"arguments": '{"command":"echo hi"}'}}
        # The call's final display (its earlier states: test_chunk_annotations_qwen.py).
        (display,) = [
            a
            for c in chunks
            for a in c.get("annotations", [])
            if a["type"] == "x-qwen-tool-display" and a["status"] in ("success", "error")
        ]
        assert display["type"] == "x-qwen-tool-display" and display["status"] == "success"
        assert display["tool_call_id"] == "offline_call_1"
        assert "".join(d.get("content", "") for d in deltas) == "The command exited with code 0."
        last = frames[-1]
        assert last["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
        assert last["usage"]["prompt_tokens"] > 0 and last["usage"]["completion_tokens"] > 0
        await proc.prompt("?fail auth nope")
        frames = await proc.until(lambda f: "choices" in f and f["choices"][0]["finish_reason"])
        assert frames[-1]["choices"][0]["finish_reason"] == "error"
        assert "nope" in frames[-1]["metadata"]["error"]["message"]
        await proc.send("{oops")
        error = await proc.next()
        assert error["error"]["code"] == "QWEN_INVALID_INPUT"
        _, code = await proc.finish()
        assert code == 0


# --- cross-face ---------------------------------------------------------------------------------


async def test_a_websocket_client_watches_the_qwen_session(workspace: Path) -> None:
    session_id = str(uuid.uuid4())
    flags = ["--session-id", session_id, "--websocket", "ws://127.0.0.1:0"]
    async with qwen(workspace, *flags, stderr=subprocess.PIPE) as proc:
        url = await read_listening_url(proc.process, timeout=TIMEOUT)
        await proc.prompt("make the thread")
        await proc.result()
        async with ws_client(url, "watcher") as ws:
            identity = {"channelName": "qwen", "userId": "local", "channelContext": session_id}
            listed = await ws.request("thread/list", {"identity": identity})
            (thread,) = listed["data"]
            assert thread["originChannel"] == "qwen" and thread["channelContext"] == session_id
            await ws.request("thread/subscribe", {"threadId": thread["id"]})
            mark = len(ws.messages)
            await proc.prompt("?stream 5")
            frames = await proc.result()
            completed, watched = await watched_turn(ws, thread["id"], mark)
            assert watched == frames[-1]["result"] == "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 "
            assert completed["params"]["turn"]["initiator"]["channelName"] == "qwen"


async def test_an_exclusion_keeps_the_agent_control_tools(workspace: Path) -> None:
    """A set chosen by exclusion keeps the agent-control tools (docs/subagents.md);
    one chosen with --core-tools (test above) has only what it names."""
    async with qwen(workspace, "--exclude-tools", "edit") as proc:
        await proc.prompt("hello")
        frames = await proc.result()
        tools = frames[0]["tools"]
        assert "edit_file" not in tools and "read_file" in tools
        assert tools[-5:] == ["SpawnAgent", "SendInput", "WaitAgent", "ResumeAgent", "CloseAgent"]


async def test_a_large_prompt_comes_back_to_a_client_that_reads(workspace: Path) -> None:
    """A prompt of 9 MiB is echoed in both the `assistant` and `result` frames,
    queued at once: more than 16 MiB, within the 48 MiB bound (the client was
    dropped at 8 MiB)."""
    text = "x" * (9 * 1024 * 1024)
    line = {"type": "user", "session_id": "", "message": {"role": "user", "content": text}}
    done = await run_once(
        workspace,
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        stdin=json.dumps(line).encode() + b"\n",
    )
    assert done.returncode == 0, done.stderr[-500:]
    frames = [json.loads(frame) for frame in done.stdout.splitlines()]
    (result,) = of(frames, "result")
    assert result["result"] == f"You said: {text}"
