"""The server's state directory ``.craft/`` can arrive with a checkout (issue 24):
links in it never send the server's writes, reads or deletions elsewhere.

- a symlinked ``.craft/appserver.lock`` stops the start (one stderr line, exit 2)
  without touching what it points to;
- terminal output is written, read and removed only inside the real
  ``.craft/terminals/`` (a linked terminals or thread directory is refused);
- a stored terminal's ``outputPath`` is never opened: its output is read from
  the file its ids name, without following a link;
- MCP stdio servers that start together both start (the SDK is imported once).

docs/security.md maps these promises here; docs/tools.md says where output lives.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.client import RpcClient
from tests.support.mcp_helpers import ECHO_TOOLS
from tests.support.servers import child_env, running_server, server_command
from tests.support.turns import Approver, new_thread, one_item, run_turn

TERMINALS = {"backgroundTerminals": True}
SECRET = "the user's secret\n"


def _craft(workspace: Path) -> Path:
    craft = workspace / ".craft"
    craft.mkdir(exist_ok=True)
    return craft


async def test_a_linked_lock_file_stops_the_start_and_is_not_written(
    workspace: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    lock = _craft(workspace) / "appserver.lock"
    lock.symlink_to(precious)
    with anyio.fail_after(60):
        result = await anyio.run_process(
            server_command(workspace), input=b"", check=False, env=child_env()
        )
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert "symbolic link" in stderr and str(lock) in stderr
    assert result.stdout == b""
    assert precious.read_text() == "precious\n"
    assert lock.is_symlink()


async def test_deleting_a_thread_removes_nothing_through_a_linked_terminals_dir(
    workspace: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victimdir"
    victim.mkdir()
    (_craft(workspace) / "terminals").symlink_to(victim, target_is_directory=True)
    async with running_server("stdio", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
        kept = victim / thread_id / "important.txt"
        kept.parent.mkdir()
        kept.write_text("keep\n")
        await client.request("thread/delete", {"threadId": thread_id})
    assert kept.read_text() == "keep\n"


async def test_no_output_is_written_through_a_linked_terminals_dir(
    workspace: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victimdir"
    victim.mkdir()
    (_craft(workspace) / "terminals").symlink_to(victim, target_is_directory=True)
    async with running_server("stdio", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
        result = await _background(client, thread_id, "echo written")
        assert "cannot create the output file" in result, result
    assert list(victim.iterdir()) == []


async def test_a_linked_thread_directory_is_neither_written_nor_removed(
    workspace: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victimdir"
    victim.mkdir()
    (victim / "important.txt").write_text("keep\n")
    async with running_server("stdio", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
        terminals = _craft(workspace) / "terminals"
        terminals.mkdir()
        (terminals / thread_id).symlink_to(victim, target_is_directory=True)
        result = await _background(client, thread_id, "echo written")
        assert "cannot create the output file" in result, result
        await client.request("thread/delete", {"threadId": thread_id})
    assert [p.name for p in victim.iterdir()] == ["important.txt"]
    assert (victim / "important.txt").read_text() == "keep\n"
    assert (terminals / thread_id).is_symlink()


async def test_a_stored_output_path_is_never_read(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    async with running_server("stdio", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
    # What a checkout's database can hold: a row naming any file, and a row
    # whose file (where its ids put it) is a link to one.
    named, linked = "term_00000000000a", "term_00000000000b"
    _store_terminal(workspace, thread_id, named, output_path=str(secret))
    thread_dir = workspace / ".craft" / "terminals" / thread_id
    thread_dir.mkdir(parents=True)
    (thread_dir / f"{linked}.log").symlink_to(secret)
    _store_terminal(workspace, thread_id, linked, output_path=str(thread_dir / f"{linked}.log"))
    async with (
        running_server("stdio", workspace) as sut,
        sut.connect(capabilities=TERMINALS) as client,
    ):
        listed = await client.request("terminal/list", {"threadId": thread_id})
        read = [
            (await client.request("terminal/read", {"sessionId": session}))["terminal"]
            for session in (named, linked)
        ]
    for terminal in [*listed["terminals"], *read]:
        assert "secret" not in terminal["output"], terminal
        assert terminal["output"] == "(no output)"
        # Reported where its output lives, not where the row said.
        expected = thread_dir / f"{terminal['sessionId']}.log"
        assert terminal["outputPath"] == str(expected)
    assert secret.read_text() == SECRET


# Run in a fresh interpreter (this one may have imported the SDK already): the
# second server starts while the first one's connection is importing the SDK.
TWO_SERVERS = """
import json, os, sys
from pathlib import Path
import anyio
from appserver.protocol.mcp import McpServerConfig
from appserver.services.mcp.client import McpClientError, open_connection
from appserver.services.mcp.config import launch_spec
from tests.support.mcp_helpers import echo_config

async def connect(name, results):
    config = McpServerConfig.model_validate(echo_config(name))
    spec = launch_spec(config, Path.cwd(), os.environ)
    try:
        async with open_connection(spec) as connection:
            results[name] = f"ready: {len(connection.tools)} tools"
    except McpClientError as exc:
        results[name] = f"error: {exc}"

async def main():
    results = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(connect, "first", results)
        # Until the first connection's import is under way (or it is done).
        while "mcp" not in sys.modules and not results:
            await anyio.sleep(0)
        tg.start_soon(connect, "second", results)
    print(json.dumps(results))

anyio.run(main)
"""


async def test_two_mcp_servers_starting_together_both_become_ready() -> None:
    with anyio.fail_after(120):
        result = await anyio.run_process(
            [sys.executable, "-c", TWO_SERVERS],
            cwd=Path(__file__).parents[2],
            env=child_env(),
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == {
        "first": f"ready: {ECHO_TOOLS} tools",
        "second": f"ready: {ECHO_TOOLS} tools",
    }


async def _background(client: RpcClient, thread_id: str, command: str) -> str:
    """The model runs ``command`` in the background (asked, and accepted: a
    workspace whose ``.craft/`` came with it is not trusted); the tool result's text."""
    Approver(client, "accept")
    arguments = {"command": command, "run_in_background": True, "yield_time_ms": 20}
    mark = client.mark()
    turn_id, end = await run_turn(client, thread_id, f"?tool shell {json.dumps(arguments)}")
    assert end["method"] == "turn/completed"
    payload: dict[str, Any] = one_item(client, turn_id, "toolResult", mark)["payload"]
    return json.dumps(payload)


def _store_terminal(workspace: Path, thread_id: str, session_id: str, output_path: str) -> None:
    """A finished terminal row as another tool (or a checkout) could write it."""
    record = {
        "sessionId": session_id,
        "threadId": thread_id,
        "command": "cat",
        "workingDirectory": str(workspace),
        "source": "host",
        "status": "completed",
        "output": "",
        "outputPath": output_path,
        "exitCode": 0,
        "startedAt": "2026-01-01T00:00:00+00:00",
        "completedAt": "2026-01-01T00:00:01+00:00",
        "wallTimeMs": 1000,
        "originalOutputChars": len(SECRET),
        "truncated": False,
    }
    with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:
        db.execute(
            "INSERT INTO terminals (session_id, thread_id, status, started_at, terminal_json)"
            " VALUES (?, ?, 'completed', ?, ?)",
            (session_id, thread_id, record["startedAt"], json.dumps(record)),
        )
    db.close()


@pytest.mark.parametrize("linked", [".craft", ".craft/appserver.db", ".craft/appserver.db-wal"])
async def test_a_linked_state_directory_or_database_stops_the_start(
    linked: str, workspace: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere"
    if linked == ".craft":
        target.mkdir()
    else:
        target.write_bytes(b"")
        (workspace / ".craft").mkdir()
    (workspace / linked).symlink_to(target)
    command = server_command(workspace)
    with anyio.fail_after(60):
        done = await anyio.run_process(command, input=b"", check=False)
    assert done.returncode == 2
    assert done.stdout == b""
    [line] = done.stderr.decode().strip().splitlines()
    assert "symbolic link" in line
    if linked == ".craft":
        assert list(target.iterdir()) == []
    else:
        assert target.read_bytes() == b""
