"""In-process servers whose cron scheduler and heartbeat timer run on a FakeClock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.support.client import RpcClient
from tests.support.cron_clock import FakeClock, epoch_ms
from tests.support.servers import ServerUnderTest, running_server

# Far in the future, so a server still on the system clock never finds these
# jobs due before the test swaps in its fake clock. A Monday, 10:00 UTC.
T0 = epoch_ms("2100-01-04T10:00:00")


@asynccontextmanager
async def clocked_server(
    workspace: Path, start_ms: int = T0, kind: str = "memory"
) -> AsyncIterator[tuple[ServerUnderTest, FakeClock]]:
    """A memory (or WebSocket) server whose cron and heartbeat use a FakeClock.

    The tests write the workspace's .craft/ (config.json, HEARTBEAT.md) themselves,
    as its user would: the server is told to trust it."""
    async with running_server(kind, workspace, trust_workspace=True) as sut:
        assert sut.app is not None and sut.app.heartbeat is not None
        clock = FakeClock(start_ms)
        if sut.app.cron is not None:
            sut.app.cron.use_clock(clock)
        sut.app.heartbeat.use_clock(clock)
        yield sut, clock


def write_config(workspace: Path, config: dict[str, Any]) -> None:
    craft = workspace / ".craft"
    craft.mkdir(exist_ok=True)
    (craft / "config.json").write_text(json.dumps(config), "utf-8")


async def add_job(client: RpcClient, **params: Any) -> dict[str, Any]:
    """``cron/add`` with defaults (name "job", message "hello", every hour)."""
    params.setdefault("name", "job")
    params.setdefault("message", "hello")
    params.setdefault("schedule", {"kind": "every", "everyMs": 3_600_000})
    job: dict[str, Any] = (await client.request("cron/add", params))["job"]
    return job


async def list_jobs(client: RpcClient, include_disabled: bool = True) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = (
        await client.request("cron/list", {"includeDisabled": include_disabled})
    )["jobs"]
    return jobs


async def job_result(
    client: RpcClient, start: int = 0, job_id: str | None = None, timeout: float = 10
) -> dict[str, Any]:
    """Params of the next ``system/jobResult`` (of ``job_id``) from ``start``."""
    return await client.notification(
        "system/jobResult",
        timeout=timeout,
        start=start,
        where=lambda p: job_id is None or p.get("jobId") == job_id,
    )
