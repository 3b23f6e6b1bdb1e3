"""Shared fixtures: every async test runs on anyio's asyncio backend."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.servers import TRANSPORTS, ServerUnderTest, running_server


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Mark coroutine tests for anyio before parametrisation happens.
    if name.startswith("test") and inspect.iscoroutinefunction(obj):
        pytest.mark.anyio(obj)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture(params=TRANSPORTS)
async def server(request: pytest.FixtureRequest, workspace: Path) -> AsyncIterator[ServerUnderTest]:
    """The same server over each transport (stdio: one client per process)."""
    async with running_server(request.param, workspace) as sut:
        yield sut


@pytest.fixture(params=["memory", "websocket"])
async def multi_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    """A server that accepts several clients at once."""
    async with running_server(request.param, workspace) as sut:
        yield sut


IDENTITY = {"channelName": "cli", "userId": "local"}
