"""A face whose workspace cannot open answers its client's first request with its
own protocol's error frames and exits 1 (issue 28), as real processes: a process
holding the workspace lock exclusively, and a database that is not one."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.storage.lock import WorkspaceLock
from tests.support.line_peer import face_env

TIMEOUT = 30.0


@contextmanager
def held_exclusively(workspace: Path) -> Iterator[None]:
    lock = WorkspaceLock(workspace / ".craft" / "appserver.lock")
    lock.acquire({}, 0.0, False)
    try:
        yield
    finally:
        lock.release()


@contextmanager
def unreadable_database(workspace: Path) -> Iterator[None]:
    (workspace / ".craft").mkdir()
    (workspace / ".craft" / "appserver.db").write_bytes(os.urandom(8192))
    yield


BREAKERS: dict[str, Callable[[Path], Any]] = {
    "locked": held_exclusively,
    "unreadable": unreadable_database,
}


async def run(workspace: Path, argv: list[str], lines: list[dict[str, Any]]) -> Any:
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    with anyio.fail_after(TIMEOUT):
        done = await anyio.run_process(
            [sys.executable, "-m", "appserver", *argv],
            input=data,
            env=face_env(),
            cwd=workspace,
            check=False,
        )
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, frames, done.stderr.decode()


@pytest.mark.parametrize("breaker", sorted(BREAKERS))
async def test_acp_answers_initialize_with_an_error(workspace: Path, breaker: str) -> None:
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    with BREAKERS[breaker](workspace):
        code, frames, stderr = await run(
            workspace, ["acp", "--workspace", str(workspace)], [initialize]
        )
    assert code == 1, stderr
    assert len(frames) == 1 and frames[0]["id"] == 0
    assert frames[0]["error"]["code"] == -32603
    assert "appserver cannot start" in frames[0]["error"]["message"]


@pytest.mark.parametrize("breaker", sorted(BREAKERS))
async def test_zot_answers_the_first_command_with_error_and_done(
    workspace: Path, breaker: str
) -> None:
    prompt = {"id": "p1", "type": "prompt", "message": "hi"}
    with BREAKERS[breaker](workspace):
        code, frames, stderr = await run(
            workspace, ["rpc", "--workspace", str(workspace)], [prompt]
        )
    assert code == 1, stderr
    assert [frame["type"] for frame in frames] == ["response", "error", "done"]
    assert frames[0]["id"] == "p1" and frames[0]["success"] is False
    assert "appserver cannot start" in frames[1]["message"]


@pytest.mark.parametrize("breaker", sorted(BREAKERS))
async def test_qwen_answers_initialize_with_a_control_error_and_a_result(
    workspace: Path, breaker: str
) -> None:
    initialize = {
        "type": "control_request",
        "request_id": "init-1",
        "request": {"subtype": "initialize"},
    }
    argv = ["--input-format", "stream-json", "--output-format", "stream-json"]
    with BREAKERS[breaker](workspace):
        code, frames, stderr = await run(workspace, argv, [initialize])
    assert code == 1, stderr
    assert [frame["type"] for frame in frames] == ["control_response", "result"]
    response = frames[0]["response"]
    assert response["subtype"] == "error" and response["request_id"] == "init-1"
    assert frames[1]["is_error"] is True
    assert "appserver cannot start" in frames[1]["error"]["message"]


async def test_a_one_shot_qwen_prompt_gets_an_error_result(workspace: Path) -> None:
    with held_exclusively(workspace):
        code, frames, _ = await run(workspace, ["-p", "hi", "--output-format", "stream-json"], [])
    assert code == 1
    assert [frame["type"] for frame in frames] == ["result"]
    assert frames[0]["is_error"] is True
