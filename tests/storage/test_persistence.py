"""State survives restarts of a real server process; one server per workspace
(reference §8 persistence and workspace lock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from websockets.asyncio.client import connect

from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY, start_thread
from tests.support.servers import (
    ProcessStream,
    WsStream,
    child_env,
    read_listening_url,
    server_command,
)

LIST_ALL = {"identity": IDENTITY, "includeArchived": True}


def lock_path(workspace: Path) -> Path:
    return workspace / ".craft" / "appserver.lock"


@asynccontextmanager
async def ws_process(workspace: Path) -> AsyncIterator[tuple[Process, str]]:
    """``appserver app-server --listen ws://127.0.0.1:0``; yields it and its URL."""
    process = await anyio.open_process(
        server_command(workspace, "--listen", "ws://127.0.0.1:0"),
        env=child_env(),
        stdin=subprocess.DEVNULL,
    )
    async with process:
        try:
            yield process, await read_listening_url(process)
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.fail_after(10):
                await process.wait()


@asynccontextmanager
async def stdio_process(workspace: Path, *extra: str) -> AsyncIterator[Process]:
    process = await anyio.open_process(server_command(workspace, *extra), env=child_env())
    async with process:
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.fail_after(10):
                await process.wait()


@asynccontextmanager
async def client_over(stream: Any, name: str = "persist") -> AsyncIterator[RpcClient]:
    async with anyio.create_task_group() as tg:
        client = RpcClient(stream, name)
        await client.run(tg)
        await client.initialize()
        yield client
        tg.cancel_scope.cancel()


async def make_history(client: RpcClient) -> dict[str, dict[str, Any]]:
    """Threads in every state; returns ``thread/read`` snapshots by id."""
    named = await start_thread(client)
    await client.request("thread/rename", {"threadId": named["id"], "displayName": "Alpha"})
    archived = await start_thread(client, displayName="Old")
    await client.request("thread/archive", {"threadId": archived["id"]})
    paused = await start_thread(client, historyMode="client", config={"model": "m"})
    await client.request("thread/mode/set", {"threadId": paused["id"], "mode": "plan"})
    await client.request("thread/pause", {"threadId": paused["id"]})
    elsewhere = await start_thread(
        client, identity={**IDENTITY, "channelName": "telegram", "channelContext": "chat:1"}
    )
    snapshots = {}
    for thread in (named, archived, paused, elsewhere):
        read = await client.request("thread/read", {"threadId": thread["id"], "includeTurns": True})
        snapshots[thread["id"]] = read["thread"]
    assert snapshots[named["id"]]["displayName"] == "Alpha"
    assert snapshots[archived["id"]]["status"] == "archived"
    assert snapshots[paused["id"]]["configuration"] == {"model": "m", "mode": "plan"}
    return snapshots


async def assert_history(client: RpcClient, snapshots: dict[str, dict[str, Any]]) -> None:
    for thread_id, before in snapshots.items():
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert read["thread"] == before
    listed = await client.request("thread/list", {**LIST_ALL, "crossChannelOrigins": ["telegram"]})
    assert {s["id"] for s in listed["data"]} == set(snapshots)
    statuses = {s["id"]: s["status"] for s in listed["data"]}
    assert statuses == {tid: snap["status"] for tid, snap in snapshots.items()}


async def test_websocket_restart_keeps_everything(workspace: Path) -> None:
    async with ws_process(workspace) as (process, url):
        async with connect(url) as ws, client_over(WsStream(ws)) as client:
            snapshots = await make_history(client)
        lock = json.loads(lock_path(workspace).read_text())
        assert lock["pid"] == process.pid
        assert lock["endpoints"]["appServerWebSocket"] == url
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await process.wait() == 0
    assert not lock_path(workspace).exists()

    async with ws_process(workspace) as (process, url):
        async with connect(url) as ws, client_over(WsStream(ws)) as client:
            await assert_history(client, snapshots)
            # Numbering of thread notifications continues after the restart.
            tid = next(iter(snapshots))
            mark = client.mark()
            await client.request("thread/rename", {"threadId": tid, "displayName": "Beta"})
            renamed = await client.notification("thread/renamed", start=mark)
            assert renamed["seq"] > 2
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(10):
            assert await process.wait() == 0
    assert not lock_path(workspace).exists()


async def test_stdio_restart_keeps_everything_and_stdout_is_pure_json(workspace: Path) -> None:
    async with stdio_process(workspace, "--log-level", "debug") as process:
        stream = ProcessStream(process)
        async with client_over(stream) as client:
            snapshots = await make_history(client)
            # Provoke error paths too: they log, and logs must not reach stdout.
            await client.send_raw("{not json")
            await client.fail("no/such/method")
            await client.settle()
            await client.close()  # EOF on stdin ends a stdio server
            with anyio.fail_after(10):
                assert await process.wait() == 0
            # Read to the end of stdout.
            with pytest.raises(ConnectionError):
                await client.wait(lambda m: False, timeout=5)
        # Everything the server wrote was one JSON object per line.
        assert stream._buffer == b""
        for frame in client.raw:
            assert isinstance(json.loads(frame), dict), frame
        assert len(client.raw) == len(client.messages) > 10
        assert process.stderr is not None
        stderr = b""
        async for chunk in process.stderr:
            stderr += chunk
        assert b"DEBUG" in stderr  # the logs went to stderr
    assert not lock_path(workspace).exists()

    async with stdio_process(workspace) as process, client_over(ProcessStream(process)) as client:
        await assert_history(client, snapshots)
        await client.close()
        with anyio.fail_after(10):
            assert await process.wait() == 0


async def test_second_server_shares_and_stale_lock_recovered(workspace: Path) -> None:
    # Issue 28: a second server on the workspace is no longer refused; it
    # joins the first (docs/architecture.md, "Several processes on one workspace").
    async with ws_process(workspace) as (first, url):
        async with connect(url) as ws, client_over(WsStream(ws)) as client:
            thread = await start_thread(client)
        with anyio.fail_after(20):
            second = await anyio.run_process(
                server_command(workspace),
                env=child_env(),
                check=False,
                stdin=subprocess.DEVNULL,
            )
        assert second.returncode == 0, second.stderr.decode()
        assert "in use" not in second.stderr.decode()
        assert second.stdout == b""
        # The second server's start and exit did not disturb the running one.
        async with connect(url) as ws, client_over(WsStream(ws)) as client:
            assert (await client.request("thread/read", {"threadId": thread["id"]}))["thread"]
        first.kill()
        with anyio.fail_after(10):
            assert await first.wait() == -signal.SIGKILL
    # kill -9 leaves the lock file behind, but not the lock.
    assert lock_path(workspace).exists()
    async with ws_process(workspace) as (process, url):
        lock = json.loads(lock_path(workspace).read_text())
        assert lock["pid"] == process.pid != first.pid
        async with connect(url) as ws, client_over(WsStream(ws)) as client:
            listed = await client.request("thread/list", LIST_ALL)
            assert [s["id"] for s in listed["data"]] == [thread["id"]]
        process.terminate()
        with anyio.fail_after(10):
            assert await process.wait() == 0
    assert not lock_path(workspace).exists()
    assert os.listdir(workspace) == [".craft"]


async def test_signal_right_after_ready_shuts_down_cleanly(workspace: Path) -> None:
    """A supervisor may stop the server as soon as it announces its endpoint."""
    for _ in range(3):
        async with ws_process(workspace) as (process, _url):
            process.terminate()
            with anyio.fail_after(10):
                assert await process.wait() == 0
        assert not lock_path(workspace).exists()
