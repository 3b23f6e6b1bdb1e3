"""`AppServerClient.spawn` with a real `appserver` that exits at start: the
pending `initialize` fails at once, naming the exit code and the server's last
stderr lines, whatever happens to the server's stderr."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from appserver_client import AppServerClient, ConnectFailed

from appserver.storage.lock import WorkspaceLock
from tests.support.servers import child_env, server_command

FAST = 10.0  # seconds; far below the 60 s request timeout that used to expire


@pytest.mark.parametrize("stderr", ["inherit", "capture"])
async def test_spawn_of_a_server_that_exits_fails_fast_with_its_stderr(
    workspace: Path, stderr: str, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    with pytest.raises(ConnectFailed) as failed:
        await AppServerClient.spawn(
            server_command(workspace, "--no-such-flag"), env=child_env(), stderr=stderr
        )
    assert time.monotonic() - started < FAST
    message = str(failed.value)
    assert "exited with code 2" in message
    assert "unrecognized arguments: --no-such-flag" in message
    if stderr == "inherit":  # still passed through to ours
        assert "unrecognized arguments: --no-such-flag" in capfd.readouterr().err


async def test_spawn_beside_another_server_shares_the_workspace(workspace: Path) -> None:
    """A second spawn on a workspace another server serves connects and sees the same
    threads (issue 28: every process is a node on the workspace's store)."""
    async with AppServerClient.spawn(
        server_command(workspace), env=child_env(), stderr="capture"
    ) as first:
        started = await first.thread_start(identity={"channelName": "cli", "userId": "local"})
        async with AppServerClient.spawn(
            server_command(workspace), env=child_env(), stderr="capture"
        ) as second:
            read = await second.thread_read(thread_id=started["thread"]["id"])
            assert read["thread"]["id"] == started["thread"]["id"]


async def test_spawn_into_a_workspace_held_exclusively_fails_fast(workspace: Path) -> None:
    lock = WorkspaceLock(workspace / ".craft" / "appserver.lock")
    lock.acquire({"pid": os.getpid()})
    try:
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as failed:
            await AppServerClient.spawn(
                server_command(workspace), env=child_env(), stderr="capture"
            )
        assert time.monotonic() - started < FAST
        assert "exited with code" in str(failed.value)
        assert str(failed.value).count("|") <= 4  # the last lines, not the whole log
    finally:
        lock.release()
