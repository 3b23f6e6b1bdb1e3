"""End to end: a real ``appserver`` subprocess, the offline model calling ``shell``.

Known read-only commands run without an approval request; anything else is
asked with the reason; the thread and the workspace settings turn it off.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.runtime.read_only_setting import ENVIRONMENT_VARIABLE
from tests.support.client import RpcClient
from tests.support.servers import running_server
from tests.support.turns import Approver, items_completed, new_thread, run_turn


@pytest.fixture(autouse=True)
def read_only_unasked(monkeypatch: pytest.MonkeyPatch) -> None:
    # tests/conftest.py makes every server ask; these servers run with the default.
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)


def _git_repository(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "a.txt").write_text("hello\n")


async def _shell_turn(client: RpcClient, thread_id: str, command: str) -> dict[str, Any]:
    mark = client.mark()
    turn_id, terminal = await run_turn(client, thread_id, f"!{command}", timeout=20)
    assert terminal["method"] == "turn/completed"
    (result,) = items_completed(client, turn_id, "toolResult", mark)
    return dict(result["payload"])


async def test_read_only_commands_run_unasked_and_the_rest_says_why(workspace: Path) -> None:
    _git_repository(workspace)
    with anyio.fail_after(60):
        async with running_server("stdio", workspace) as server, server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client)

            listing = await _shell_turn(client, thread_id, "ls")
            assert listing["success"] and "a.txt" in listing["result"]
            status = await _shell_turn(client, thread_id, "git status --short")
            assert status["success"] and "?? a.txt" in status["result"]
            assert approver.requests == []

            declined = await _shell_turn(client, thread_id, "ls; rm a.txt")
            assert not declined["success"] and declined["result"].startswith("Declined")
            (request,) = approver.requests
            assert request["params"]["operation"] == "ls; rm a.txt"
            assert request["params"]["reason"] == (
                "Run a shell command in . — runs several commands (`;`)"
            )
            assert (workspace / "a.txt").exists()


async def test_the_thread_setting_turns_it_off(workspace: Path) -> None:
    with anyio.fail_after(60):
        async with running_server("stdio", workspace) as server, server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(client, autoApproveReadOnlyCommands=False)
            listing = await _shell_turn(client, thread_id, "ls")
            assert listing["success"]
            (request,) = approver.requests
            assert "autoApproveReadOnlyCommands is off" in request["params"]["reason"]
            other = await new_thread(client)
            await _shell_turn(client, other, "ls")
            assert len(approver.requests) == 1


async def test_the_workspace_setting_turns_it_off(workspace: Path) -> None:
    craft = workspace / ".craft"
    craft.mkdir()
    off = {"Permissions": {"AutoApproveReadOnlyCommands": False}}
    (craft / "config.json").write_text(json.dumps(off))
    with anyio.fail_after(60):
        async with running_server("stdio", workspace) as server, server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(client)
            await _shell_turn(client, thread_id, "ls")
            assert len(approver.requests) == 1
            # Read on each call: turned back on without a restart.
            (craft / "config.json").write_text("{}")
            await _shell_turn(client, thread_id, "ls")
            assert len(approver.requests) == 1
