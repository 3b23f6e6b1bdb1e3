"""A stdio MCP server's process group, ended with its session and known to the
process watchdog (``tools/reaper.py``), as a shell command's is.

The MCP SDK starts each server in a new session (its own process group) and,
when the session closes, kills that group only if the server itself outlives
its grace: a server that exits at once leaves what it started running, holding
the stderr pipe (a thread and a descriptor here), and nothing ends any of it
if this process is killed. So the server's group is listed with the watchdog
from its start, and whatever is left in it when the session has closed is
ended (SIGTERM, then SIGKILL).

The SDK does not hand its process over; :func:`install` wraps the one function
of ``mcp.client.stdio`` that starts it (``mcp`` is pinned to one major version
in pyproject.toml), and :func:`ended` collects the groups started in its scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import anyio

from appserver.tools.groups import kill_process_group
from appserver.tools.reaper import REAPER, group_alive

_started: ContextVar[list[int] | None] = ContextVar("mcp_server_groups", default=None)


def install() -> None:
    """Have every stdio MCP server the SDK starts tracked (once per process)."""
    from mcp.client import stdio

    original = stdio._create_platform_compatible_process
    if getattr(original, "tracked_by_appserver", False):
        return

    async def create(*args: Any, **kwargs: Any) -> Any:
        process = await original(*args, **kwargs)
        REAPER.track(process.pid)  # a new session: its pid is its group's id
        started = _started.get()
        if started is not None:
            started.append(process.pid)
        return process

    create.tracked_by_appserver = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = create


@asynccontextmanager
async def ended() -> AsyncIterator[None]:
    """End the process groups of the servers started in this scope once it
    closes (enter it before the SDK's client, so that it closes after)."""
    started: list[int] = []
    _started.set(started)
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            for pgid in started:
                if group_alive(pgid):
                    await kill_process_group(pgid)
                REAPER.untrack(pgid)
