"""Shared fixtures: every async test runs on anyio's asyncio backend."""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.servers import TRANSPORTS, ServerUnderTest, running_server

# The user's settings and workspace trust (appserver/storage/user_settings.py) go to a
# directory of this test run, never the developer's ~/.config/appserver; servers the
# tests start inherit it.
os.environ["APPSERVER_HOME"] = tempfile.mkdtemp(prefix="appserver-home-")
# Known read-only shell commands (`ls`, `echo hi`) are asked like any other in the servers
# the tests start, as the tests written before they ran unasked expect; the tests of
# running them unasked (tests/tools/test_read_only_unasked.py) remove this.
os.environ["APPSERVER_READ_ONLY_COMMANDS"] = "ask"

# Real PostgreSQL: postgres_cluster (one per xdist worker) and postgres_url (a fresh database).
pytest_plugins = ("tests.support.postgres",)


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A module that sets STORES = BOTH_STORES runs each test that uses a
    # server fixture once per store.
    stores = getattr(metafunc.module, "STORES", None)
    if stores and "store" in metafunc.fixturenames:
        metafunc.parametrize("store", stores, indirect=True)


#: ``STORES = BOTH_STORES`` in a test module: its server tests run on SQLite and PostgreSQL.
BOTH_STORES = ("sqlite", "postgresql")


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str | None:
    """The ``--store`` URL the ``server`` fixtures use: ``None`` is the
    workspace's SQLite file; ``"postgresql"`` gets a fresh PostgreSQL database."""
    if getattr(request, "param", "sqlite") == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return None


@pytest.fixture(params=TRANSPORTS)
async def server(
    request: pytest.FixtureRequest, workspace: Path, store: str | None
) -> AsyncIterator[ServerUnderTest]:
    """The same server over each transport (stdio: one client per process)."""
    async with running_server(request.param, workspace, store=store) as sut:
        yield sut


@pytest.fixture(params=["memory", "websocket"])
async def multi_server(
    request: pytest.FixtureRequest, workspace: Path, store: str | None
) -> AsyncIterator[ServerUnderTest]:
    """A server that accepts several clients at once."""
    async with running_server(request.param, workspace, store=store) as sut:
        yield sut


IDENTITY = {"channelName": "cli", "userId": "local"}
