"""``appserver rpc``: zot's RPC mode, driven as a real subprocess.

The four reference clients of zot (``examples/rpc/{shell,python,node,go}``
in patriceckhart/zot) are replayed frame for frame through a ``zot`` shim on
PATH, as they spawn it; every other test talks to ``appserver rpc`` directly.
Every stdout line of every run is checked to be one zot frame with exactly
its documented fields.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from appserver.runtime.instructions import Environment
from appserver.storage.user_settings import workspace_home
from tests.support.json_lines import JsonLinesProcess, piped_process
from tests.support.processes import ws_client
from tests.support.servers import child_env, read_listening_url
from tests.support.turns import Approver, start_turn, watched_turn

TIMEOUT = 20.0
SLOW = "?stream 1000\n?delay 20"  # ~20 s of text unless aborted
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

Frame = dict[str, Any]

# Exactly the fields of each event (turn_end may add `error`).
EVENT_FIELDS: dict[str, set[str]] = {
    "turn_start": {"step"},
    "user_message": {"content", "time"},
    "assistant_start": set(),
    "text_delta": {"delta"},
    "tool_call": {"id", "name", "args"},
    "tool_progress": {"id", "text"},
    "tool_result": {"id", "is_error", "content"},
    "assistant_message": {"content", "time"},
    "usage": {"input", "output", "cache_read", "cache_write", "cost_usd", "cumulative"},
    "turn_end": {"stop"},
    "done": set(),
    "error": {"message"},
    "compact_done": {"summary"},
}
USAGE_FIELDS = {"input", "output", "cache_read", "cache_write", "cost_usd"}
STOPS = {"end_turn", "tool_use", "length", "error", "aborted"}


def check_blocks(blocks: Any) -> None:
    assert isinstance(blocks, list), blocks
    for block in blocks:
        kind = block["type"]
        if kind == "text":
            assert set(block) == {"type", "text"} and isinstance(block["text"], str), block
        elif kind == "image":
            assert set(block) == {"type", "mime_type", "bytes"}, block
            assert isinstance(block["bytes"], int), block
        elif kind == "tool_call":
            assert set(block) == {"type", "id", "name", "args"}, block
        elif kind == "tool_result":
            assert set(block) == {"type", "call_id", "is_error", "content"}, block
            assert isinstance(block["is_error"], bool)
            check_blocks(block["content"])
        else:
            raise AssertionError(f"unknown block {block}")


def check_usage(usage: Frame) -> None:
    for key in USAGE_FIELDS:
        assert isinstance(usage[key], int | float), usage


def check_frame(line: bytes) -> Frame:
    """One stdout line: one zot frame, exactly its fields."""
    frame = json.loads(line)
    assert isinstance(frame, dict), line
    kind = frame["type"]
    if kind == "response":
        assert {"type", "command", "success"} <= set(frame), frame
        assert set(frame) <= {"type", "id", "command", "success", "data", "error"}, frame
        assert isinstance(frame["success"], bool) and isinstance(frame["command"], str)
        if "id" in frame:
            assert isinstance(frame["id"], str) and frame["id"], frame
        if not frame["success"]:
            assert isinstance(frame["error"], str) and "data" not in frame, frame
        else:
            assert "error" not in frame, frame
        return frame
    assert kind in EVENT_FIELDS, frame
    fields = set(frame) - {"type"}
    if kind == "turn_end":
        assert fields in ({"stop"}, {"stop", "error"}), frame
        assert frame["stop"] in STOPS, frame
    else:
        assert fields == EVENT_FIELDS[kind], frame
    if kind in ("user_message", "assistant_message"):
        check_blocks(frame["content"])
        assert isinstance(frame["time"], str) and frame["time"]
    elif kind == "tool_result":
        check_blocks(frame["content"])
    elif kind == "usage":
        check_usage(frame)
        assert set(frame["cumulative"]) == USAGE_FIELDS
        check_usage(frame["cumulative"])
    elif kind == "turn_start":
        assert isinstance(frame["step"], int) and frame["step"] >= 1
    return frame


class Zot(JsonLinesProcess):
    """One ``appserver rpc`` (or ``zot rpc`` through the shim) process."""

    def __init__(self, process: Process) -> None:
        super().__init__(process, check_frame, TIMEOUT)

    async def until_type(self, kind: str) -> list[Frame]:
        return await self.until(lambda f: f["type"] == kind)

    async def response(self, request_id: str) -> Frame:
        frames = await self.until(lambda f: f["type"] == "response" and f.get("id") == request_id)
        return frames[-1]

    async def call(self, command: Frame) -> Frame:
        """Send a quick command and return its response."""
        await self.send(command)
        return await self.response(command["id"])


def zot_env(**extra: str) -> dict[str, str]:
    env = child_env()
    for name in ("ZOTCORE_RPC_TOKEN", "TERVACORE_RPC_TOKEN", "APPSERVER_PROVIDER"):
        env.pop(name, None)
    env.update(extra)
    return env


@asynccontextmanager
async def zot(
    workspace: Path,
    *flags: str,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    stderr: Any = None,
) -> AsyncIterator[Zot]:
    argv = command or [
        sys.executable,
        "-m",
        "appserver",
        "rpc",
        "--workspace",
        str(workspace),
        *flags,
    ]
    async with piped_process(
        argv, workspace, env or zot_env(), workspace.parent / "stderr.log", stderr, TIMEOUT
    ) as process:
        yield Zot(process)


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def types(frames: list[Frame]) -> list[str]:
    return [f["type"] for f in frames if f["type"] not in ("text_delta", "usage")]


def text(frames: list[Frame]) -> str:
    return "".join(f["delta"] for f in of(frames, "text_delta"))


def auto_approve(workspace: Path) -> None:
    """The user's default approval policy for the workspace (what a bare `zot rpc`
    gets); never the workspace's own .craft/config.json."""
    settings = workspace_home(workspace)
    settings.mkdir(parents=True, exist_ok=True)
    config = {"Permissions": {"DefaultApprovalPolicy": "autoApprove"}}
    (settings / "config.json").write_text(json.dumps(config))


# --- the reference clients ----------------------------------------------------------


def shim(tmp_path: Path) -> dict[str, str]:
    """A `zot` on PATH that runs this face (the docs' shim, with this interpreter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "zot"
    script.write_text(
        f'#!/bin/sh\n[ "$1" = rpc ] && shift\nexec "{sys.executable}" -m appserver rpc "$@"\n'
    )
    script.chmod(0o755)
    env = zot_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def client_frames(client: str, prompt: str, token: str | None) -> list[str]:
    """What each reference client writes to `zot rpc`'s stdin, byte for byte."""
    if client == "shell":  # jq -nc
        hello = json.dumps({"id": "0", "type": "hello", "token": token}, separators=(",", ":"))
        first = json.dumps({"id": "1", "type": "prompt", "message": prompt}, separators=(",", ":"))
    elif client == "python":  # json.dumps(**command), id added last
        hello = json.dumps({"type": "hello", "token": token, "id": uuid.uuid4().hex[:8]})
        first = json.dumps({"type": "prompt", "message": prompt, "id": uuid.uuid4().hex[:8]})
    elif client == "node":  # JSON.stringify, id added last
        compact = (",", ":")
        hello = json.dumps(
            {"type": "hello", "token": token, "id": secrets.token_hex(4)}, separators=compact
        )
        first = json.dumps(
            {"type": "prompt", "message": prompt, "id": secrets.token_hex(4)}, separators=compact
        )
    else:  # go: json.Marshal of a map sorts the keys
        hello = json.dumps({"id": "0", "token": token, "type": "hello"}, separators=(",", ":"))
        first = json.dumps({"id": "1", "message": prompt, "type": "prompt"}, separators=(",", ":"))
    return ([hello] if token else []) + [first]


async def replay_client(client: str, proc: Zot, prompt: str, token: str | None) -> Frame:
    """Send what the client sends, react to events as it does; returns what it showed."""
    for line in client_frames(client, prompt, token):
        await proc.send(line)
    shown: Frame = {"text": "", "tools": [], "tool_errors": 0, "usage": [], "exit": 0}
    while True:
        event = await proc.next()
        kind = event.get("type")
        if kind == "text_delta":
            shown["text"] += event.get("delta", "")
        elif kind == "tool_call":
            shown["tools"].append((event.get("name"), event.get("args", {})))
        elif kind == "tool_result" and client in ("python", "node") and event.get("is_error"):
            shown["tool_errors"] += 1
        elif kind == "usage" and client in ("python", "node"):
            cum = event.get("cumulative", {})
            shown["usage"].append(f"{cum.get('input')} {cum.get('output')} {cum['cost_usd']:.4f}")
        elif kind == "error":
            shown["error"] = event.get("message")
            shown["exit"] = 1
            if client in ("python", "shell"):
                break  # they stop at the first error
        elif kind == "done":
            break
    return shown


@pytest.mark.parametrize("token", [None, "s3cret-token"], ids=["no-token", "token"])
@pytest.mark.parametrize("client", ["shell", "python", "node", "go"])
async def test_reference_client_prompt_with_a_tool_call(
    client: str, token: str | None, workspace: Path, tmp_path: Path
) -> None:
    auto_approve(workspace)
    env = shim(tmp_path)
    if token:
        env["ZOTCORE_RPC_TOKEN"] = token
    async with zot(workspace, command=["zot", "rpc"], env=env) as proc:
        shown = await replay_client(client, proc, "!echo hi", token)
        assert shown["exit"] == 0
        assert shown["tools"] == [("shell", {"command": "echo hi"})]
        assert shown["text"] == "The command exited with code 0."
        assert shown["tool_errors"] == 0
        if client in ("python", "node"):
            assert len(shown["usage"]) == 2  # one per model call, cumulative
        if token:
            hello = proc.frames[0]
            assert hello["command"] == "hello" and hello["success"] is True
            assert hello["data"]["protocol_version"] == 1
        rest, code = await proc.finish()
        assert rest == [] and code == 0
        # A bare `zot rpc` serves the directory it runs in.
        assert (workspace / ".craft" / "appserver.db").exists()


@pytest.mark.parametrize("client", ["shell", "python", "node", "go"])
async def test_reference_client_sees_a_provider_error(
    client: str, workspace: Path, tmp_path: Path
) -> None:
    async with zot(workspace, command=["zot", "rpc"], env=shim(tmp_path)) as proc:
        shown = await replay_client(client, proc, "?fail auth bad key", None)
        assert shown["exit"] == 1 and "bad key" in shown["error"]
        # The client closes stdin (and waits 5 s at most): the process ends cleanly.
        await proc.close()
        with anyio.fail_after(5):
            assert await proc.process.wait() == 0


# --- commands --------------------------------------------------------------------------


async def test_every_quick_command(workspace: Path) -> None:
    async with zot(workspace) as proc:
        hello = await proc.call({"id": "h", "type": "hello"})
        assert hello == {
            "type": "response",
            "id": "h",
            "command": "hello",
            "success": True,
            "data": {
                "protocol_version": 1,
                "version": hello["data"]["version"],
                "provider": "offline",
                "model": "offline",
            },
        }
        assert await proc.call({"id": "p", "type": "ping"}) == {
            "type": "response",
            "id": "p",
            "command": "ping",
            "success": True,
            "data": {"pong": True},
        }
        # Without an id, none is echoed.
        await proc.send({"type": "ping"})
        assert await proc.next() == {
            "type": "response",
            "command": "ping",
            "success": True,
            "data": {"pong": True},
        }
        state = await proc.call({"id": "s", "type": "get_state"})
        assert state["data"] == {
            "provider": "offline",
            "model": "offline",
            "cwd": str(workspace.resolve()),
            "message_count": 0,
            "busy": False,
            "usage": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0, "cost_usd": 0.0},
        }
        models = await proc.call({"id": "m", "type": "get_models"})
        assert models["data"] == {
            "models": [
                {
                    "id": "offline",
                    "provider": "offline",
                    "context_window": 0,
                    "max_output": 0,
                    "reasoning": False,
                }
            ]
        }
        ok = await proc.call({"id": "sm", "type": "set_model", "model": "offline"})
        assert ok["success"] is True and ok["data"] == {"model": "offline"}
        bad = await proc.call({"id": "sm2", "type": "set_model", "model": "claude-opus-4-5"})
        assert bad["success"] is False and "claude-opus-4-5" in bad["error"]
        assert "data" not in bad
        missing = await proc.call({"id": "sm3", "type": "set_model"})
        assert missing["success"] is False
        reasoning = await proc.call({"id": "r", "type": "set_reasoning", "reasoning": "high"})
        assert reasoning == {
            "type": "response",
            "id": "r",
            "command": "set_reasoning",
            "success": True,
        }
        messages = await proc.call({"id": "g", "type": "get_messages"})
        assert messages["data"] == {"messages": []}
        cleared = await proc.call({"id": "c", "type": "clear"})
        assert cleared == {"type": "response", "id": "c", "command": "clear", "success": True}
        abort = await proc.call({"id": "a", "type": "abort"})  # nothing running: fine
        assert abort == {"type": "response", "id": "a", "command": "abort", "success": True}
        rest, code = await proc.finish()
        assert rest == [] and code == 0


async def test_prompt_events_state_and_messages(workspace: Path) -> None:
    async with zot(workspace, "--approval-policy", "autoApprove") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "hello there"})
        frames = await proc.until_type("done")
        assert frames[0] == {
            "type": "response",
            "id": "1",
            "command": "prompt",
            "success": True,
            "data": {"started": True},
        }
        assert types(frames[1:]) == [
            "user_message",
            "turn_start",
            "assistant_start",
            "assistant_message",
            "turn_end",
            "done",
        ]
        assert frames[1]["content"] == [{"type": "text", "text": "hello there"}]
        assert of(frames, "turn_start") == [{"type": "turn_start", "step": 1}]
        assert text(frames) == "You said: hello there"
        assert len(of(frames, "text_delta")) >= 3
        (message,) = of(frames, "assistant_message")
        assert message["content"] == [{"type": "text", "text": "You said: hello there"}]
        assert of(frames, "turn_end") == [{"type": "turn_end", "stop": "end_turn"}]
        (usage,) = of(frames, "usage")
        assert usage["input"] > 0 and usage["output"] == 4  # the words streamed
        assert usage["cumulative"] == {key: usage[key] for key in USAGE_FIELDS}

        # A tool call: two model calls, the tool's result between them.
        await proc.send({"id": "2", "type": "prompt", "message": "!echo hi"})
        frames = await proc.until_type("done")
        assert types(frames[1:]) == [
            "user_message",
            "turn_start",
            "assistant_start",
            "assistant_message",
            "tool_call",
            "turn_end",
            *(["tool_progress"] if of(frames, "tool_progress") else []),
            "tool_result",
            "turn_start",
            "assistant_start",
            "assistant_message",
            "turn_end",
            "done",
        ]
        (call,) = of(frames, "tool_call")
        assert call == {
            "type": "tool_call",
            "id": "offline_call_1",
            "name": "shell",
            "args": {"command": "echo hi"},
        }
        assert of(frames, "assistant_message")[0]["content"] == [{**call, "type": "tool_call"}]
        assert [f["step"] for f in of(frames, "turn_start")] == [1, 2]
        assert [f["stop"] for f in of(frames, "turn_end")] == ["tool_use", "end_turn"]
        (result,) = of(frames, "tool_result")
        assert result["id"] == "offline_call_1" and result["is_error"] is False
        assert "hi" in result["content"][0]["text"]
        for progress in of(frames, "tool_progress"):
            assert progress["id"] == "offline_call_1"
        usages = of(proc.frames, "usage")
        assert len(usages) == 3
        total_in = sum(u["input"] for u in usages)
        total_out = sum(u["output"] for u in usages)
        assert usages[-1]["cumulative"]["input"] == total_in
        assert usages[-1]["cumulative"]["output"] == total_out

        state = await proc.call({"id": "s", "type": "get_state"})
        assert state["data"]["busy"] is False
        assert state["data"]["message_count"] == 6
        assert state["data"]["usage"]["input"] == total_in
        assert state["data"]["usage"]["output"] == total_out

        messages = (await proc.call({"id": "g", "type": "get_messages"}))["data"]["messages"]
        assert [m["role"] for m in messages] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        for message in messages:
            assert set(message) == {"role", "content", "time"}
            check_blocks(message["content"])
        assert messages[0]["content"] == [{"type": "text", "text": "hello there"}]
        assert messages[0]["time"] == frames_time(proc.frames, "user_message", 0)
        assert messages[1]["content"] == [{"type": "text", "text": "You said: hello there"}]
        assert messages[3]["content"] == [
            {"type": "tool_call", "id": "offline_call_1", "name": "shell", "args": call["args"]}
        ]
        (block,) = messages[4]["content"]
        assert block["type"] == "tool_result" and block["call_id"] == "offline_call_1"
        assert block["is_error"] is False and "hi" in block["content"][0]["text"]
        assert messages[5]["content"] == [
            {"type": "text", "text": "The command exited with code 0."}
        ]
        times = [m["time"] for m in messages]
        assert times == sorted(times)
        rest, code = await proc.finish()
        assert rest == [] and code == 0


def frames_time(frames: list[Frame], kind: str, index: int) -> str:
    return str(of(frames, kind)[index]["time"])


async def test_clear_starts_a_new_thread_and_keeps_the_old_one(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "first"})
        await proc.until_type("done")
        assert (await proc.call({"id": "s", "type": "get_state"}))["data"]["message_count"] == 2
        assert (await proc.call({"id": "c", "type": "clear"}))["success"] is True
        assert (await proc.call({"id": "g", "type": "get_messages"}))["data"]["messages"] == []
        await proc.send({"id": "2", "type": "prompt", "message": "second"})
        await proc.until_type("done")
        messages = (await proc.call({"id": "g2", "type": "get_messages"}))["data"]["messages"]
        assert [m["content"][0]["text"] for m in messages] == ["second", "You said: second"]
        await proc.finish()
    import sqlite3

    with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:
        rows = db.execute("SELECT origin_channel, user_id FROM threads").fetchall()
    assert rows == [("zot", "local"), ("zot", "local")]


async def test_clear_while_busy_is_refused(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": SLOW})
        await proc.until_type("text_delta")
        busy = await proc.call({"id": "c", "type": "clear"})
        assert busy["success"] is False and busy["error"] == "agent is busy"
        assert (await proc.call({"id": "s", "type": "get_state"}))["data"]["busy"] is True
        await proc.send({"id": "a", "type": "abort"})
        await proc.until_type("done")


async def test_compact_summarises_and_get_messages_shows_what_the_model_sees(
    workspace: Path,
) -> None:
    async with zot(workspace) as proc:
        # Nothing to compact yet: zot's error, then done.
        await proc.send({"id": "c0", "type": "compact"})
        frames = await proc.until_type("done")
        assert frames[0]["data"] == {"started": True}
        assert frames[1:] == [
            {"type": "error", "message": "nothing to compact"},
            {"type": "done"},
        ]
        for index, message in enumerate(["alpha", "beta"]):
            await proc.send({"id": f"p{index}", "type": "prompt", "message": message})
            await proc.until_type("done")
        await proc.send({"id": "c1", "type": "compact"})
        frames = await proc.until_type("done")
        assert frames[0] == {
            "type": "response",
            "id": "c1",
            "command": "compact",
            "success": True,
            "data": {"started": True},
        }
        assert [f["type"] for f in frames[1:]] == ["compact_done", "done"]
        summary = frames[1]["summary"]
        assert "alpha" in summary and "You said: beta" in summary
        messages = (await proc.call({"id": "g", "type": "get_messages"}))["data"]["messages"]
        assert len(messages) == 1 and messages[0]["role"] == "user"
        assert summary in messages[0]["content"][0]["text"]
        # The model now sees the summary plus what follows.
        await proc.send({"id": "p3", "type": "prompt", "message": "gamma"})
        frames = await proc.until_type("done")
        assert text(frames) == "You said: gamma"
        messages = (await proc.call({"id": "g2", "type": "get_messages"}))["data"]["messages"]
        assert [m["role"] for m in messages] == ["user", "user", "assistant"]
        assert summary in messages[0]["content"][0]["text"]
        assert messages[1]["content"] == [{"type": "text", "text": "gamma"}]
        assert messages[0]["time"] <= messages[1]["time"] <= messages[2]["time"]
        state = await proc.call({"id": "s", "type": "get_state"})
        assert state["data"]["message_count"] == 3


async def test_a_second_prompt_queues_and_runs_after_the_first(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "?stream 20\n?delay 20"})
        await proc.send({"id": "2", "type": "prompt", "message": "next"})
        await proc.send({"id": "3", "type": "compact"})
        await proc.send({"id": "s", "type": "get_state"})
        frames = await proc.until_type("done")
        responses = [f for f in frames if f["type"] == "response"]
        # The first is answered at once; the queued ones when they start.
        assert [r["id"] for r in responses] == ["1", "s"]
        assert responses[1]["data"]["busy"] is True
        assert text(frames) == "".join(f"chunk {i} " for i in range(1, 21))
        frames = await proc.until_type("done")
        assert frames[0] == {
            "type": "response",
            "id": "2",
            "command": "prompt",
            "success": True,
            "data": {"started": True},
        }
        assert of(frames, "user_message")[0]["content"][0]["text"] == "next"
        assert text(frames) == "You said: next"
        frames = await proc.until_type("done")
        assert frames[0]["id"] == "3" and [f["type"] for f in frames[1:]] == [
            "compact_done",
            "done",
        ]
        rest, code = await proc.finish()
        assert rest == [] and code == 0


async def test_abort_mid_stream_then_the_queued_prompt_runs(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": SLOW})
        await proc.send({"id": "2", "type": "prompt", "message": "after"})
        await proc.until_type("text_delta")
        await proc.send({"id": "a", "type": "abort"})
        frames = await proc.until_type("done")
        after_abort = frames[next(i for i, f in enumerate(frames) if f.get("id") == "a") :]
        assert after_abort[0] == {
            "type": "response",
            "id": "a",
            "command": "abort",
            "success": True,
        }
        tail = [f for f in after_abort[1:] if f["type"] not in ("text_delta", "usage")]
        assert [f["type"] for f in tail][-2:] == ["turn_end", "done"]
        assert tail[-2] == {"type": "turn_end", "stop": "aborted"}
        assert of(frames, "error") == []
        assert len(of(frames, "text_delta")) < 1000
        # The abort applied to the running prompt only: the queued one runs.
        frames = await proc.until_type("done")
        assert frames[0]["id"] == "2" and text(frames) == "You said: after"
        # The aborted prompt's partial answer is kept in the transcript.
        messages = (await proc.call({"id": "g", "type": "get_messages"}))["data"]["messages"]
        assert messages[1]["role"] == "assistant"
        assert messages[1]["content"][0]["text"].startswith("chunk 1 ")


async def test_an_abort_written_right_behind_its_prompt_aborts_it(workspace: Path) -> None:
    """Both lines in one write: the prompt is answered as started before the abort
    is read, so the abort is its, even before the worker takes the prompt up (it
    was lost then, and the turn ran to its end)."""
    async with zot(workspace) as proc:
        await proc.call({"id": "w", "type": "get_state"})  # started and idle
        prompt = {"id": "1", "type": "prompt", "message": SLOW}
        abort = {"id": "a", "type": "abort"}
        await proc.send(b"".join(json.dumps(frame).encode() + b"\n" for frame in (prompt, abort)))
        frames = await proc.until_type("done")
        assert [f.get("id") for f in of(frames, "response")] == ["1", "a"]
        assert of(frames, "turn_end") == [{"type": "turn_end", "stop": "aborted"}]
        assert len(of(frames, "text_delta")) < 1000
        state = await proc.call({"id": "s", "type": "get_state"})
        assert state["data"]["busy"] is False


async def test_abort_during_a_tool_call(workspace: Path) -> None:
    async with zot(workspace, "--approval-policy", "autoApprove") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!sleep 30"})
        await proc.until_type("tool_call")
        await proc.until(lambda f: f["type"] == "turn_end")
        await proc.send({"id": "a", "type": "abort"})
        frames = await proc.until_type("done")
        assert [f["type"] for f in frames] == ["response", "tool_result", "turn_end", "done"]
        assert frames[1]["id"] == "offline_call_1" and frames[1]["is_error"] is True
        assert frames[2] == {"type": "turn_end", "stop": "aborted"}


async def test_a_failed_turn_ends_with_turn_end_error_done(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "?fail rate_limit slow down"})
        frames = await proc.until_type("done")
        tail = frames[-3:]
        assert tail[0]["type"] == "turn_end" and tail[0]["stop"] == "error"
        assert "slow down" in tail[0]["error"]
        assert tail[1] == {"type": "error", "message": tail[0]["error"]}
        assert tail[2] == {"type": "done"}
        # Non-fatal: the next prompt works.
        await proc.send({"id": "2", "type": "prompt", "message": "ok"})
        assert text(await proc.until_type("done")) == "You said: ok"


# --- tools and approvals ----------------------------------------------------------------


async def test_tool_call_declined_under_the_default_policy(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!touch made.txt"})
        frames = await proc.until_type("done")
        (result,) = of(frames, "tool_result")
        assert result["is_error"] is True
        assert result["content"][0]["text"].startswith("Declined")
        assert text(frames) == "The shell call was declined."
        assert of(frames, "error") == []  # a declined call is the model's business
        assert not (workspace / "made.txt").exists()


async def test_tool_call_runs_with_auto_approve(workspace: Path) -> None:
    async with zot(workspace, "--approval-policy", "autoApprove") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!touch made.txt"})
        frames = await proc.until_type("done")
        (result,) = of(frames, "tool_result")
        assert result["is_error"] is False
        assert (workspace / "made.txt").exists()


async def test_the_interrupt_policy_aborts_the_prompt(workspace: Path) -> None:
    async with zot(workspace, "--approval-policy", "interrupt") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!touch made.txt"})
        frames = await proc.until_type("done")
        assert types(frames)[-5:] == [
            "assistant_message",
            "tool_call",
            "tool_result",
            "turn_end",
            "done",
        ]
        assert of(frames, "tool_result")[0]["is_error"] is True
        assert frames[-2] == {"type": "turn_end", "stop": "aborted", "error": "approvalCancelled"}
        assert of(frames, "error") == []
        assert not (workspace / "made.txt").exists()


async def test_stdout_carries_only_frames(workspace: Path) -> None:
    """Tool output, logs and warnings never reach stdout (Zot.next checks each line)."""
    async with zot(workspace, "--approval-policy", "autoApprove", "--log-level", "debug") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!echo to-stdout; echo oops >&2"})
        frames = await proc.until_type("done")
        assert "to-stdout" in of(frames, "tool_result")[0]["content"][0]["text"]
        await proc.send({"id": "2", "type": "prompt", "message": "?fail other boom"})
        await proc.until_type("done")
        rest, code = await proc.finish()
        assert rest == [] and code == 0
    assert all(isinstance(frame, dict) for frame in proc.frames)


# --- bad input ---------------------------------------------------------------------------


async def test_malformed_and_unknown_commands_are_answered_and_the_loop_goes_on(
    workspace: Path,
) -> None:
    async with zot(workspace) as proc:
        await proc.send("this is not json")
        frame = await proc.next()
        assert frame["command"] == "" and frame["success"] is False and "id" not in frame
        assert frame["error"].startswith("malformed json: ")
        for bad in ["[1, 2]", '"text"', '{"id": 7, "type": "ping"}', '{"type": ["ping"]}']:
            await proc.send(bad)
            frame = await proc.next()
            assert frame["success"] is False and frame["command"] == "", bad
            assert frame["error"].startswith("malformed json: "), bad
        await proc.send(b"\xff\xfe{}\n")
        frame = await proc.next()
        assert frame["error"].startswith("malformed json: ")
        await proc.send(b"\n   \n\r\n")  # blank lines are ignored
        unknown = await proc.call({"id": "u", "type": "teleport"})
        assert unknown == {
            "type": "response",
            "id": "u",
            "command": "teleport",
            "success": False,
            "error": "unknown command",
        }
        await proc.send({"id": "t"})
        assert (await proc.next())["error"] == "unknown command"
        bad_prompts: list[Frame] = [
            {"id": "b1", "type": "prompt", "message": 5},
            {"id": "b2", "type": "prompt", "message": "x", "images": "nope"},
            {"id": "b3", "type": "prompt", "message": "x", "images": [{"data": "%%%"}]},
            {"id": "b4", "type": "prompt", "message": "x", "images": [{"data": "aGVsbG8="}]},
        ]
        for prompt in bad_prompts:
            frame = await proc.call(prompt)
            assert frame["command"] == "prompt" and frame["success"] is False, prompt
        assert (await proc.call({"id": "p", "type": "ping"}))["success"] is True
        rest, code = await proc.finish()
        assert rest == [] and code == 0


async def test_lone_surrogates_never_wedge_or_kill_the_process(workspace: Path) -> None:
    """A "\\ud800" escape in an id is echoed escaped; in a prompt it is refused
    (error, done) and the next prompt runs."""
    async with zot(workspace) as proc:
        await proc.send(b'{"type":"ping","id":"\\ud800"}\n')
        pong = await proc.next()
        assert pong["id"] == "\ud800" and pong["success"] is True
        await proc.send(b'{"id":"s","type":"prompt","message":"\\ud800"}\n')
        frames = [await proc.next() for _ in range(3)]
        assert [f["type"] for f in frames] == ["response", "error", "done"]
        assert "surrogate" in frames[1]["message"]
        await proc.send({"id": "ok", "type": "prompt", "message": "fine"})
        rest, code = await proc.finish()
        assert code == 0 and "You said: fine" in text(rest)


async def test_a_line_over_16_mib_is_refused_and_the_loop_goes_on(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send(b'{"id":"big","type":"prompt","message":"' + b"x" * (16 << 20) + b'"}\n')
        refused = await proc.next()
        assert refused["success"] is False and refused["command"] == ""
        assert refused["error"].startswith("line too long")
        assert (await proc.call({"id": "p", "type": "ping"}))["success"] is True


async def test_stdin_closing_finishes_the_prompts_in_flight(workspace: Path) -> None:
    async with zot(workspace) as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "?stream 30\n?delay 10"})
        await proc.send({"id": "2", "type": "prompt", "message": "queued"})
        rest, code = await proc.finish()
        assert code == 0
        assert [f["type"] for f in rest].count("done") == 2
        assert rest[-1] == {"type": "done"}
        assert "You said: queued" in text(rest)


# --- auth ---------------------------------------------------------------------------------


async def test_token_first_frame_must_be_hello(workspace: Path) -> None:
    async with zot(workspace, env=zot_env(ZOTCORE_RPC_TOKEN="t0k3n")) as proc:
        refused = await proc.call({"id": "1", "type": "ping"})
        assert refused == {
            "type": "response",
            "id": "1",
            "command": "ping",
            "success": False,
            "error": "auth required: send hello with token first",
        }
        await proc.send({"id": "2", "type": "prompt", "message": "sneaky"})
        assert (await proc.response("2"))["success"] is False
        hello = await proc.call({"id": "0", "type": "hello", "token": "t0k3n"})
        assert hello["success"] is True and hello["data"]["protocol_version"] == 1
        assert (await proc.call({"id": "3", "type": "ping"}))["success"] is True
        rest, code = await proc.finish()
        assert rest == [] and code == 0


@pytest.mark.parametrize("variable", ["ZOTCORE_RPC_TOKEN", "TERVACORE_RPC_TOKEN"])
async def test_a_wrong_token_ends_the_process(variable: str, workspace: Path) -> None:
    async with zot(workspace, env=zot_env(**{variable: "right"})) as proc:
        frame = await proc.call({"id": "0", "type": "hello", "token": "wrong"})
        assert frame == {
            "type": "response",
            "id": "0",
            "command": "hello",
            "success": False,
            "error": "invalid token",
        }
        with anyio.fail_after(TIMEOUT):
            assert await proc.process.wait() == 1  # stdin still open: it exits by itself


async def test_tools_never_see_the_token(workspace: Path) -> None:
    token = "very-secret-" + secrets.token_hex(8)
    env = zot_env(TERVACORE_RPC_TOKEN=token)
    async with zot(workspace, "--approval-policy", "autoApprove", env=env) as proc:
        await proc.call({"id": "0", "type": "hello", "token": token})
        script = "!env; cat /proc/$PPID/environ | tr '\\0' '\\n'; cat /proc/$PPID/cmdline"
        await proc.send({"id": "1", "type": "prompt", "message": script})
        frames = await proc.until_type("done")
        (result,) = of(frames, "tool_result")
        output = result["content"][0]["text"]
        assert "HOME=" in output or "PATH=" in output
        assert token not in output


# --- images ---------------------------------------------------------------------------------


async def test_images_are_stored_and_passed_to_the_model(workspace: Path) -> None:
    data = base64.b64encode(PNG).decode()
    async with zot(workspace) as proc:
        command = {
            "id": "1",
            "type": "prompt",
            "message": "look",
            "images": [{"mime_type": "image/png", "data": data}],
        }
        await proc.send(command)
        frames = await proc.until_type("done")
        assert frames[1]["type"] == "user_message"
        assert frames[1]["content"] == [
            {"type": "text", "text": "look"},
            {"type": "image", "mime_type": "image/png", "bytes": len(PNG)},
        ]
        assert text(frames) == "You said: look [1 image attached]"
        stored = workspace / ".craft" / "attachments" / "images"
        assert (stored / f"{hashlib.sha256(PNG).hexdigest()}.png").read_bytes() == PNG
        messages = (await proc.call({"id": "g", "type": "get_messages"}))["data"]["messages"]
        assert messages[0]["content"][1] == {
            "type": "image",
            "mime_type": "image/png",
            "bytes": len(PNG),
        }
        # An image alone is a prompt too.
        await proc.send({"id": "2", "type": "prompt", "images": [{"data": data}]})
        frames = await proc.until_type("done")
        assert frames[1]["content"] == [
            {"type": "image", "mime_type": "image/png", "bytes": len(PNG)}
        ]


# --- flags ------------------------------------------------------------------------------------


async def test_zot_flags(workspace: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "AGENTS.md").write_text("not read at all\n")
    flags = [
        "--cwd",
        str(other),
        "--system-prompt",
        "one two three",
        "--append-system-prompt",
        "four",
        "--reasoning",
        "high",
        "--no-context-files",
        "--tools",
        "read,ls",
    ]
    async with zot(workspace, *flags) as proc:
        state = await proc.call({"id": "s", "type": "get_state"})
        assert state["data"]["cwd"] == str(other.resolve())
        await proc.send({"id": "1", "type": "prompt", "message": "hi"})
        frames = await proc.until_type("done")
        # The offline model counts the system prompt's words and the message's:
        # the replaced prompt and the appended line, the environment block (always
        # there), no AGENTS.md (--no-context-files), and "hi".
        where = other.resolve()
        environment = Environment(cwd=where, workspace=where, approval_policy="default")
        assert of(frames, "usage")[0]["input"] == 5 + len(environment.render().split())
        await proc.send({"id": "2", "type": "prompt", "message": "!echo hi"})
        frames = await proc.until_type("done")
        (result,) = of(frames, "tool_result")  # shell is not among the tools
        assert result["is_error"] is True and "unknown tool" in result["content"][0]["text"]
    assert (other / ".craft" / "appserver.db").exists()
    assert not (workspace / ".craft").exists()


async def test_max_steps_fails_the_prompt(workspace: Path) -> None:
    async with zot(workspace, "--max-steps", "1", "--approval-policy", "autoApprove") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!echo hi"})
        frames = await proc.until_type("done")
        assert [f["step"] for f in of(frames, "turn_start")] == [1]
        assert frames[-3]["type"] == "turn_end" and frames[-3]["stop"] == "error"
        assert frames[-2]["type"] == "error" and "1 model calls" in frames[-2]["message"]


async def test_no_tools(workspace: Path) -> None:
    async with zot(workspace, "--no-tools", "--approval-policy", "autoApprove") as proc:
        await proc.send({"id": "1", "type": "prompt", "message": "!touch x"})
        frames = await proc.until_type("done")
        assert "unknown tool" in of(frames, "tool_result")[0]["content"][0]["text"]
        assert not (workspace / "x").exists()


async def test_bad_flags_exit_2(workspace: Path) -> None:
    for flags in (["--tools", "teleport"], ["--max-steps", "0"]):
        result = await anyio.run_process(
            [sys.executable, "-m", "appserver", "rpc", "--workspace", str(workspace), *flags],
            env=zot_env(),
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 2 and result.stdout == b"", flags


# --- another front door on the same thread ----------------------------------------------------

WEBSOCKET = ("--websocket", "ws://127.0.0.1:0")


async def test_a_websocket_client_watches_and_approves_the_zot_thread(workspace: Path) -> None:
    async with zot(workspace, *WEBSOCKET, stderr=subprocess.PIPE) as proc:
        url = await read_listening_url(proc.process, timeout=TIMEOUT)
        await proc.send({"id": "1", "type": "prompt", "message": "make the thread"})
        await proc.until_type("done")
        async with ws_client(url, "watcher") as ws:
            listed = await ws.request(
                "thread/list",
                {
                    "identity": {"channelName": "cli", "userId": "nobody"},
                    "crossChannelOrigins": ["zot"],
                },
            )
            (thread,) = listed["data"]
            assert thread["originChannel"] == "zot" and thread["userId"] == "local"
            # The face's own identity finds it too.
            mine = await ws.request(
                "thread/list", {"identity": {"channelName": "zot", "userId": "local"}}
            )
            assert [t["id"] for t in mine["data"]] == [thread["id"]]
            await ws.request("thread/subscribe", {"threadId": thread["id"]})
            approver = Approver(ws, "accept")
            mark = len(ws.messages)
            await proc.send({"id": "2", "type": "prompt", "message": "?stream 5"})
            frames = await proc.until_type("done")
            assert text(frames) == "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 "
            completed, watched = await watched_turn(ws, thread["id"], mark)
            assert watched == text(frames)
            assert completed["params"]["turn"]["initiator"]["channelName"] == "zot"
            # Under the default policy the WebSocket client may answer the approval.
            await proc.send({"id": "3", "type": "prompt", "message": "!touch approved.txt"})
            frames = await proc.until_type("done")
            assert len(approver.requests) == 1
            assert of(frames, "tool_result")[0]["is_error"] is False
            assert (workspace / "approved.txt").exists()


async def test_turns_other_clients_run_on_the_thread_are_not_reported(workspace: Path) -> None:
    """A prompt sent while a WebSocket client's turn runs waits for it, and zot
    reports only its own turn."""
    async with zot(workspace, *WEBSOCKET, stderr=subprocess.PIPE) as proc:
        url = await read_listening_url(proc.process, timeout=TIMEOUT)
        await proc.send({"id": "1", "type": "prompt", "message": "mine"})
        await proc.until_type("done")
        async with ws_client(url, "driver") as ws:
            listed = await ws.request(
                "thread/list", {"identity": {"channelName": "zot", "userId": "local"}}
            )
            thread_id = listed["data"][0]["id"]
            await ws.request("thread/subscribe", {"threadId": thread_id})
            theirs = await start_turn(ws, thread_id, "?stream 40\n?delay 10")
            await proc.send({"id": "2", "type": "prompt", "message": "after theirs"})
            frames = await proc.until_type("done")

            def completed(text: str) -> Callable[[Frame], bool]:
                return lambda m: (
                    m.get("method") == "turn/completed"
                    and m["params"]["turn"]["items"][0]["payload"].get("text") == text
                )

            await ws.wait(completed("after theirs"))
            order = [
                (m["method"], m["params"]["turn"]["id"])
                for m in ws.messages
                if m.get("method") in ("turn/started", "turn/completed")
            ]
            ours = order[-1][1]
            # zot's prompt started only after the other turn ended.
            assert order[-3:] == [
                ("turn/completed", theirs),
                ("turn/started", ours),
                ("turn/completed", ours),
            ]
            assert frames[0]["id"] == "2"
            assert text(frames) == "You said: after theirs"
            assert "chunk" not in json.dumps(frames)
            await ws.request(
                "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "quiet"}]}
            )
            await ws.wait(completed("quiet"))
            # Nothing of that turn reached zot's stdout.
            assert (await proc.call({"id": "p", "type": "ping"}))["success"] is True
            assert proc.frames[-1]["id"] == "p" and proc.frames[-2] == {"type": "done"}
