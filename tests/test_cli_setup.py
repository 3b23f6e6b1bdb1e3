"""What a newcomer meets when starting the server (issue 27, "Setting up and
errors"): app-server takes the flags every face takes, a busy workspace says
where to connect, a typo gets "did you mean", a bare stdio server in a terminal
says what it is, and a WebSocket server starts with one quiet block.

Every test runs the real ``appserver`` command in a subprocess."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
from anyio.abc import Process

from appserver.storage.lock import WorkspaceLock
from tests.support.processes import ws_server
from tests.support.servers import child_env

APPSERVER = [sys.executable, "-m", "appserver"]
CLIENT = {"name": "setup-test", "version": "1.0"}


def session(*requests: tuple[str, dict[str, object]]) -> bytes:
    """initialize, initialized, then ``requests`` (ids from 2), one per line."""
    frames: list[dict[str, object]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": CLIENT}},
        {"jsonrpc": "2.0", "method": "initialized"},
    ]
    frames += [
        {"jsonrpc": "2.0", "id": index, "method": method, "params": params}
        for index, (method, params) in enumerate(requests, start=2)
    ]
    return b"".join(json.dumps(frame).encode() + b"\n" for frame in frames)


async def run_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(60):
        return await anyio.run_process(
            [*APPSERVER, *args], input=stdin, env=child_env(), check=False
        )


async def read_stderr_until(process: Process, pattern: str) -> str:
    """stderr up to a line matching ``pattern`` (the process keeps running)."""
    assert process.stderr is not None
    seen = ""
    with anyio.fail_after(30):
        while not re.search(pattern, seen, re.M):
            seen += (await process.stderr.receive()).decode()
    return seen


# --- app-server's shared flags --------------------------------------------------------------


async def test_app_server_takes_the_approval_policy_and_api_key(workspace: Path) -> None:
    secret = "sk-setup-test-0123456789"
    done = await run_cli(
        "app-server",
        "--workspace",
        str(workspace),
        "--approval-policy",
        "interrupt",
        "--api-key",
        secret,
        "--log-level",
        "debug",
        stdin=session(("workspace/status", {})),
    )
    assert done.returncode == 0, done.stderr.decode()
    answers = {m.get("id"): m for m in map(json.loads, done.stdout.decode().splitlines())}
    assert answers[2]["result"]["defaultApprovalPolicy"] == "interrupt"
    assert secret.encode() not in done.stderr  # never logged


def test_every_face_flag_is_an_app_server_flag() -> None:
    """docs/faces.md: the shared flags mean for every face what they mean for app-server."""
    from appserver.cli import build_parser

    def options(command: str) -> set[str]:
        parser = build_parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices[command]._option_string_actions)

    shared = {
        "--workspace",
        "--provider",
        "--model",
        "--base-url",
        "--api-key",
        "--approval-policy",
        "--tool-env",
        "--trust-workspace",
        "--log-level",
    }
    assert shared <= options("host")
    assert shared <= options("app-server")


# --- a busy workspace -------------------------------------------------------------------------


async def test_a_busy_workspace_says_where_to_connect(workspace: Path) -> None:
    """A second server beside a running one shares the workspace (issue 28); only a
    holder of the workspace lock that keeps others out gets the message, and it says
    where to connect (the holder's lock file names its WebSocket endpoint)."""
    async with ws_server(workspace):
        done = await run_cli("app-server", "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr.decode()
    url = "ws://127.0.0.1:9100/ws"
    lock = WorkspaceLock(workspace / ".craft" / "appserver.lock")
    lock.acquire({"pid": os.getpid(), "endpoints": {"appServerWebSocket": url}})
    try:
        done = await run_cli("app-server", "--workspace", str(workspace))
    finally:
        lock.release()
    assert done.returncode == 1
    assert (
        f"connect with `--url {url}` (or the web page at http://127.0.0.1:9100/), "
        f"or stop pid {os.getpid()}" in done.stderr.decode()
    )


# --- did you mean -------------------------------------------------------------------------------


async def test_a_mistyped_option_gets_did_you_mean(workspace: Path) -> None:
    done = await run_cli("app-server", "--listn", "ws://127.0.0.1:0", "--workspace", str(workspace))
    assert done.returncode == 2
    assert (
        done.stderr.decode()
        .rstrip()
        .endswith("unrecognized arguments: --listn ws://127.0.0.1:0; did you mean --listen?")
    )


async def test_a_mistyped_command_gets_did_you_mean() -> None:
    done = await run_cli("app-servr")
    assert done.returncode == 2
    assert done.stderr.decode().rstrip().endswith("did you mean app-server?")


# --- a bare stdio server in a terminal -----------------------------------------------------------


async def test_a_stdio_server_in_a_terminal_says_what_it_speaks(workspace: Path) -> None:
    controller, terminal = os.openpty()
    try:
        process = await anyio.open_process(
            [*APPSERVER, "app-server", "--workspace", str(workspace)],
            stdin=terminal,
            env=child_env(),
        )
        os.close(terminal)
        terminal = -1
        async with process:
            try:
                said = await read_stderr_until(process, r"http://127\.0\.0\.1:9100/")
            finally:
                os.write(controller, b"\x04")  # end of input: it exits
            with anyio.fail_after(30):
                assert await process.wait() == 0
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert "JSON-RPC" in said and "stdin/stdout" in said
    assert "--listen ws://127.0.0.1:9100" in said and "make run" in said


async def test_a_stdio_server_on_a_pipe_says_nothing(workspace: Path) -> None:
    done = await run_cli("app-server", "--workspace", str(workspace))
    assert done.returncode == 0
    assert b"JSON-RPC" not in done.stderr


# --- the start-up block -----------------------------------------------------------------


async def test_a_first_start_prints_one_quiet_block(workspace: Path) -> None:
    """At the default info level on a new workspace: no migration lines, one
    listening line, then the web page, workspace, provider and model."""
    process = await anyio.open_process(
        [
            *APPSERVER,
            "app-server",
            "--listen",
            "ws://127.0.0.1:0",
            "--workspace",
            str(workspace),
            "--provider",
            "offline",
        ],
        stdin=subprocess.DEVNULL,
        env=child_env(),
    )
    async with process:
        try:
            said = await read_stderr_until(process, r"^appserver: provider .*\n")
        finally:
            process.terminate()
            with anyio.fail_after(10):
                await process.wait()
    lines = said.splitlines()
    port = re.search(r"127\.0\.0\.1:(\d+)", said)
    assert port is not None, said
    assert lines == [
        f"appserver: listening on ws://127.0.0.1:{port[1]}/ws",
        f"appserver: web client at http://127.0.0.1:{port[1]}/",
        f"appserver: workspace {workspace.resolve()}",
        "appserver: provider offline, model offline",
    ], said
