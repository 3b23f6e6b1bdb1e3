"""Logs that say what the server did (docs/logging.md): connections, requests,
turns and approvals, as text or one JSON object per line, libraries quiet."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver import logs
from tests.support.client import RpcClient
from tests.support.servers import ProcessStream, child_env
from tests.support.turns import new_thread, run_turn

APPSERVER = [sys.executable, "-m", "appserver"]
DEBUG_JSON = ("--log-level", "debug", "--log-format", "json")


async def run_session(workspace: Path, *flags: str) -> tuple[list[str], str]:
    """A real stdio server through a failing and a succeeding turn; its stderr lines
    and the id of the thread the turns ran on."""
    process = await anyio.open_process(
        [*APPSERVER, "app-server", "--workspace", str(workspace), *flags], env=child_env()
    )
    stderr = bytearray()

    async def drain() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            stderr.extend(chunk)

    async with process, anyio.create_task_group() as tg:
        tg.start_soon(drain)
        client = RpcClient(ProcessStream(process), "log-test")
        await client.run(tg)
        await client.initialize()
        thread_id = await new_thread(client)
        _, failed = await run_turn(client, thread_id, "?fail auth the key was refused")
        assert failed["method"] == "turn/failed"
        _, completed = await run_turn(client, thread_id, "hello")
        assert completed["method"] == "turn/completed"
        await client.request("thread/list", {"identity": {"channelName": "cli", "userId": "u"}})
        await client.stream.close()  # end of input: the server exits
        with anyio.fail_after(15):
            assert await process.wait() == 0
        tg.cancel_scope.cancel()
    return stderr.decode().splitlines(), thread_id


def only(entries: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    return [e for e in entries if all(e.get(k) == v for k, v in fields.items())]


async def test_json_logs_of_a_debug_session_say_what_happened(workspace: Path) -> None:
    lines, thread_id = await run_session(workspace, *DEBUG_JSON)
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= entry.keys(), entry
    # Libraries are quiet even at debug: the server's own lines are what is left.
    assert not [e for e in entries if not e["logger"].startswith("appserver")], entries
    assert not [e for e in entries if "aiosqlite" in e["message"]]

    opened = only(entries, logger="appserver.server", peer="stdio")
    assert [e["message"] for e in opened[:1]] == ["connection #1 opened (stdio)"]
    assert only(entries, clientName="log-test", clientVersion="1.0")
    closed = [e for e in opened if "closed" in e["message"]]
    assert len(closed) == 1 and closed[0]["level"] == "info"
    assert closed[0]["client"] == "log-test 1.0" and closed[0]["reason"] == "end of input"

    requests = only(entries, logger="appserver.rpc", level="debug")
    methods = [e["method"] for e in requests]
    assert methods[:3] == ["initialize", "thread/start", "turn/start"]
    assert "thread/list" in methods
    assert all(isinstance(e["durationMs"], int | float) for e in requests)
    assert all("errorCode" not in e for e in requests)

    started = only(entries, logger="appserver.turns", threadId=thread_id, level="info")
    assert [e["turnId"] for e in started if "started" in e["message"]] == ["turn_001", "turn_002"]
    failed = only(entries, logger="appserver.turns", turnId="turn_001", status="failed")
    assert len(failed) == 1
    assert failed[0]["level"] == "warning"
    assert failed[0]["errorKind"] and "the key was refused" in failed[0]["error"]
    assert isinstance(failed[0]["durationMs"], int)
    completed = only(entries, logger="appserver.turns", turnId="turn_002", status="completed")
    assert len(completed) == 1 and completed[0]["level"] == "info"


async def test_text_logs_at_the_default_level_record_turns_and_connections(
    workspace: Path,
) -> None:
    lines, thread_id = await run_session(workspace)  # info, text
    text = "\n".join(lines)
    assert "INFO appserver.server: connection #1 opened (stdio)" in text
    assert "connection #1 is log-test 1.0" in text
    assert f"WARNING appserver.turns: turn turn_001 on {thread_id} failed after" in text
    assert "the key was refused" in text
    assert f"turn turn_002 on {thread_id} completed after" in text
    assert "appserver.rpc" not in text  # requests are debug lines
    assert not any(line.startswith("{") for line in lines)


async def test_request_errors_carry_their_code(workspace: Path) -> None:
    process = await anyio.open_process(
        [*APPSERVER, "app-server", "--workspace", str(workspace), *DEBUG_JSON],
        env=child_env(),
        stdin=subprocess.PIPE,
    )
    async with process:
        assert process.stdin is not None and process.stderr is not None
        await process.stdin.send(b'{"jsonrpc":"2.0","id":7,"method":"thread/list"}\n')
        await process.stdin.aclose()
        with anyio.fail_after(15):
            assert await process.wait() == 0
        stderr = b""
        async for chunk in process.stderr:
            stderr += chunk
    entries = [json.loads(line) for line in stderr.decode().splitlines()]
    refused = only(entries, method="thread/list", requestId=7)
    assert len(refused) == 1 and refused[0]["errorCode"] == -32002  # not initialized


# --- the formatter and configuration, in process ---------------------------------------------


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in logs.QUIET_LOGGERS}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in quiet.items():
        logging.getLogger(name).setLevel(old)


def test_json_lines_carry_extra_fields_and_stay_one_line(restore_logging: None) -> None:
    stream = io.StringIO()
    logs.configure("debug", "json", stream)
    log = logging.getLogger("appserver.test")
    log.info("two\nlines", extra={"threadId": "thread_x", "durationMs": 1.5, "odd": object()})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    logging.getLogger("aiosqlite").debug("internals")
    logging.getLogger("websockets.server").info("internals")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = map(json.loads, lines)
    assert first["message"] == "two\nlines" and first["level"] == "info"
    assert first["threadId"] == "thread_x" and first["durationMs"] == 1.5
    assert first["odd"].startswith("<object")  # not JSON: written as text, not an error
    assert second["level"] == "error" and "ValueError: boom" in second["exception"]


def test_text_lines_escape_what_a_peer_put_in_a_message(restore_logging: None) -> None:
    """A client named "x\\nWARNING forged\\x1b[31m" cannot forge a line or color the terminal."""
    stream = io.StringIO()
    logs.configure("info", "text", stream)
    log = logging.getLogger("appserver.test")
    log.info("connection #%d is %s", 1, "x 1\n2026-01-01 WARNING appserver.rpc: forged\x1b[31m")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed at\r%s", "here")
    text = stream.getvalue()
    lines = text.splitlines()
    assert "\x1b" not in text and "\r" not in text
    assert lines[0].endswith(
        "connection #1 is x 1\\n2026-01-01 WARNING appserver.rpc: forged\\x1b[31m"
    )
    assert lines[1].endswith("failed at\\rhere")
    assert lines[2] == "Traceback (most recent call last):"  # a traceback keeps its lines
    assert lines[-1] == "ValueError: boom"


def test_bad_values_name_the_variable_and_the_choices() -> None:
    with pytest.raises(logs.LogConfigError, match=r"APPSERVER_LOG_LEVEL=verbose .* debug, info"):
        logs.check("verbose", "text")
    with pytest.raises(logs.LogConfigError, match=r"APPSERVER_LOG_FORMAT=xml .* text, json"):
        logs.check("info", "xml")
    logs.check("DEBUG", "JSON")  # case does not matter


@pytest.mark.parametrize("face", ["rpc", "acp"])
async def test_faces_log_json_too(face: str, workspace: Path) -> None:
    env = {**child_env(), "APPSERVER_LOG_FORMAT": "json"}
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [*APPSERVER, face, "--workspace", str(workspace), "--log-level", "debug"],
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    entries = [json.loads(line) for line in done.stderr.decode().splitlines()]
    # A fresh workspace's migrations (debug since issue 27: a first start stays quiet).
    assert only(entries, logger="appserver.storage", level="debug")
