"""A real ``appserver`` process over WebSocket, a client of it, and whether a
process still runs."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from websockets.asyncio.client import connect

from tests.support.client import RpcClient
from tests.support.servers import WsStream, child_env, read_listening_url, server_command


@asynccontextmanager
async def ws_server(
    workspace: Path, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[Process, str]]:
    """``appserver app-server --listen ws://127.0.0.1:0 EXTRA...``; yields it and its URL.

    The URL carries no token; add ``?token=`` yourself when ``extra`` sets one.
    """
    process = await anyio.open_process(
        server_command(workspace, "--listen", "ws://127.0.0.1:0", *extra),
        env=env or child_env(),
        stdin=subprocess.DEVNULL,
    )
    async with process:
        try:
            yield process, await read_listening_url(process, timeout=30)
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.fail_after(10):
                await process.wait()


@asynccontextmanager
async def ws_client(
    url: str, name: str = "recovery", capabilities: dict[str, Any] | None = None
) -> AsyncIterator[RpcClient]:
    """An initialized client of ``url``."""
    async with connect(url, max_size=None) as ws, anyio.create_task_group() as tg:
        client = RpcClient(WsStream(ws), name)
        await client.run(tg)
        await client.initialize(capabilities)
        try:
            yield client
        finally:
            tg.cancel_scope.cancel()


def alive(pid: int) -> bool:
    """Running (a zombie waiting for an init that never reaps does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")
