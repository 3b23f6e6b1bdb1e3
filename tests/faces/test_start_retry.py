"""A face's start tries again briefly when SQLite says the workspace's database is
busy (another process creating it at the same instant), and only then."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from appserver.faces.start_failure import OPEN_ATTEMPTS, StartFailure, open_runtime


def flaky_host(errors: list[str]) -> Any:
    """A ``host`` whose first opens fail with ``errors``, then yields a runtime."""
    opened: list[str] = []

    @asynccontextmanager
    async def host() -> AsyncIterator[str]:
        if len(opened) < len(errors):
            opened.append("failed")
            raise sqlite3.OperationalError(errors[len(opened) - 1])
        opened.append("runtime")
        yield "runtime"

    host.opened = opened  # type: ignore[attr-defined]
    return host


async def test_a_busy_database_is_opened_a_moment_later() -> None:
    host = flaky_host(["database is locked", "disk I/O error"])
    async with AsyncExitStack() as stack:
        assert await open_runtime(stack, host) == "runtime"
    assert host.opened == ["failed", "failed", "runtime"]


async def test_other_database_errors_and_a_lasting_lock_fail_the_start() -> None:
    for errors, tries in ((["no such table: threads"], 1), (["database is locked"] * 9, None)):
        host = flaky_host(errors)
        async with AsyncExitStack() as stack:
            failure = await open_runtime(stack, host)
        assert isinstance(failure, StartFailure) and failure.code == 1
        assert len(host.opened) == (tries or OPEN_ATTEMPTS)
