"""Several real ``appserver`` processes (nodes) on one PostgreSQL database,
each listening on its own WebSocket port, as a load balancer would spread them."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from websockets.asyncio.client import connect

from appserver.storage.db import Database
from tests.support.client import RpcClient
from tests.support.servers import WsStream, child_env, read_listening_url, server_command


class Node:
    """One server process of the cluster."""

    def __init__(self, name: str, process: Process, url: str, tg: TaskGroup) -> None:
        self.name = name
        self.process = process
        self.url = url
        self.stderr: list[bytes] = []
        self._grew = anyio.Event()  # set (and replaced) as the log grows
        tg.start_soon(self._drain)

    async def _drain(self) -> None:
        # Read the logs so a chatty node never blocks on a full pipe.
        assert self.process.stderr is not None
        try:
            async for chunk in self.process.stderr:
                self.stderr.append(chunk)
                self._grew.set()
                self._grew = anyio.Event()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def log(self) -> str:
        return b"".join(self.stderr).decode(errors="replace")

    async def wait_log(self, text: str, timeout: float = 15) -> None:
        """Wait until ``text`` appears in this node's log."""
        with anyio.fail_after(timeout):
            while text not in self.log():
                await self._grew.wait()

    @asynccontextmanager
    async def connect(
        self, name: str = "test-client", capabilities: dict[str, Any] | None = None
    ) -> AsyncIterator[RpcClient]:
        """An initialized JSON-RPC client on this node (with ``capabilities``)."""
        async with (
            connect(self.url, max_size=None) as ws,
            anyio.create_task_group() as tg,
        ):
            client = RpcClient(WsStream(ws), name)
            await client.run(tg)
            await client.initialize(capabilities)
            try:
                yield client
            finally:
                tg.cancel_scope.cancel()

    def kill(self) -> None:
        """``kill -9``: no drain, no goodbye to the database."""
        os.kill(self.process.pid, signal.SIGKILL)


@asynccontextmanager
async def running_nodes(
    count: int, workspace: Path, store: str, *extra: str, lease: float = 1.0, first: str = "A"
) -> AsyncIterator[list[Node]]:
    """Start ``count`` nodes (``first`` and the letters after it: A, B, C, ...)
    sharing ``workspace`` and ``store``."""
    async with AsyncExitStack() as stack:
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)
        options = ("--node-lease", str(lease), *extra)
        yield [
            await start_node(stack, tg, chr(ord(first) + index), workspace, store, options)
            for index in range(count)
        ]


@asynccontextmanager
async def two_nodes(
    workspace: Path, store: str, lease: float = 1.0
) -> AsyncIterator[tuple[Node, Node, RpcClient, RpcClient]]:
    """Nodes A and B, each with a connected client: ``(a, b, on_a, on_b)``."""
    async with (
        running_nodes(2, workspace, store, lease=lease) as (a, b),
        a.connect("a") as on_a,
        b.connect("b") as on_b,
    ):
        yield a, b, on_a, on_b


async def start_node(
    stack: AsyncExitStack,
    tg: TaskGroup,
    name: str,
    workspace: Path,
    store: str,
    extra: Sequence[str] = (),
) -> Node:
    command = server_command(workspace, "--listen", "ws://127.0.0.1:0", "--store", store, *extra)
    process = await stack.enter_async_context(
        await anyio.open_process(command, env=child_env(), stdin=subprocess.DEVNULL)
    )
    stack.callback(_stop, process)
    url = await read_listening_url(process)
    return Node(name, process, url, tg)


def _stop(process: Any) -> None:
    if process.returncode is None:
        process.terminate()


SEEDED_AT = "2026-01-01T00:00:00.000Z"


async def seed_running_turn(db: Database, node: str) -> None:
    """Thread ``t1`` with its turn ``turn_001`` running on ``node``, written
    straight to the shared database (as a node that took it would)."""
    await db.write(
        [
            (
                "INSERT INTO threads (id, workspace_path, workspace_key, user_id,"
                " origin_channel, status, created_at, last_active_at)"
                " VALUES ('t1', '/w', '/w', 'u', 'cli', 'active', ?, ?)",
                (SEEDED_AT, SEEDED_AT),
            ),
            (
                "INSERT INTO turns (thread_id, id, seq, status, started_at, node_id)"
                " VALUES ('t1', 'turn_001', 1, 'running', ?, ?)",
                (SEEDED_AT, node),
            ),
        ]
    )
