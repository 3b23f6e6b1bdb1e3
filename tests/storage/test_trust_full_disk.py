"""A restart on a full disk: one stderr line, the error through the protocol, exit 1.

It used to answer ``initialize`` and then exit 1 with a traceback (the recovery
of an interrupted turn could not be written); with a little less room it
printed a traceback and never exited (the database's thread kept it alive).

The disk is made full by ``tests/support/full_disk.c`` (``LD_PRELOAD``): under
the workspace, a write that needs blocks the disk does not have fails with
``ENOSPC``, as it does on a real full disk; writes within a file's allocated
blocks, and blocks a truncation frees, still work. Nothing needs root.
"""

from __future__ import annotations

import errno
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from appserver.storage.failures import StorageFailed, disk_failure
from tests.support.servers import child_env

SHIM_SOURCE = Path(__file__).resolve().parents[1] / "support" / "full_disk.c"
TIMEOUT = 20.0
IDENTITY = {"channelName": "test", "userId": "u"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"clientInfo": {"name": "full-disk-test", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "initialized"}
THREAD_LIST = {"jsonrpc": "2.0", "id": 2, "method": "thread/list", "params": {"identity": IDENTITY}}


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the full-disk shim")
    library = tmp_path_factory.mktemp("shim") / "full_disk.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(library), str(SHIM_SOURCE), "-ldl"],
        check=True,
    )
    return library


def server_env(workspace: Path, shim: Path | None = None, free: int = 0) -> dict[str, str]:
    env = {
        name: value
        for name, value in child_env().items()
        if not name.startswith("APPSERVER_") or name == "APPSERVER_HOME"
    }
    if shim is not None:
        env |= {
            "LD_PRELOAD": str(shim),
            "FULL_DISK_DIR": str(workspace.resolve()),
            "FULL_DISK_FREE": str(free),
        }
    return env


def command(workspace: Path) -> list[str]:
    return [sys.executable, "-m", "appserver", "app-server", "--workspace", str(workspace)]


def frames(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


class Stdio:
    """A stdio server, read one JSON line at a time."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.buffer = b""

    async def send(self, *messages: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(frames(*messages))

    async def answer(self, request_id: int) -> dict[str, Any]:
        assert self.process.stdout is not None
        with anyio.fail_after(TIMEOUT):
            while True:
                while b"\n" not in self.buffer:
                    self.buffer += await self.process.stdout.receive()
                line, _, self.buffer = self.buffer.partition(b"\n")
                message: dict[str, Any] = json.loads(line)
                if message.get("id") == request_id:
                    return message


async def interrupted_turn(workspace: Path) -> None:
    """Leave a turn running when the server is killed (its recovery is a write)."""
    async with await anyio.open_process(
        command(workspace), env=server_env(workspace), stderr=subprocess.DEVNULL
    ) as process:
        server = Stdio(process)
        await server.send(INITIALIZE)
        await server.answer(1)
        await server.send(
            INITIALIZED,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "thread/start",
                "params": {"identity": IDENTITY},
            },
        )
        thread_id = (await server.answer(2))["result"]["thread"]["id"]
        turn = {
            "threadId": thread_id,
            "input": [{"type": "text", "text": "?stream 1000\n?delay 20"}],
        }
        await server.send({"jsonrpc": "2.0", "id": 3, "method": "turn/start", "params": turn})
        assert (await server.answer(3))["result"]["turn"]["status"] == "running"
        process.send_signal(signal.SIGKILL)
        with anyio.fail_after(TIMEOUT):
            await process.wait()


async def run(workspace: Path, stdin: bytes, env: dict[str, str]) -> tuple[int, bytes, str]:
    with anyio.fail_after(TIMEOUT):  # it used to hang: fail, do not wait forever
        done = await anyio.run_process(command(workspace), input=stdin, env=env, check=False)
    return done.returncode, done.stdout, done.stderr.decode(errors="replace")


def the_one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [line for line in stderr.splitlines() if line.startswith("appserver:")]
    return line


@pytest.mark.parametrize("then", ["a request", "end of input"])
async def test_a_full_disk_after_initialize_is_told_to_the_client(
    workspace: Path, shim: Path, then: str
) -> None:
    await interrupted_turn(workspace)
    stdin = frames(INITIALIZE, INITIALIZED, *([THREAD_LIST] if then == "a request" else []))
    code, stdout, stderr = await run(workspace, stdin, server_env(workspace, shim))
    assert code == 1
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert answers[0]["id"] == 1 and "result" in answers[0]
    if then == "a request":
        assert answers[1] == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {
                "code": -32603,
                "message": "Server failed to start: database or disk is full",
            },
        }
    assert len(answers) == (2 if then == "a request" else 1)
    line = the_one_line(stderr)
    assert (
        line
        == f"appserver: cannot start: database or disk is full (in {workspace.resolve()}/.craft)"
    )
    # With room again, the next start recovers the turn; nothing was damaged.
    code, stdout, _ = await run(workspace, frames(INITIALIZE), server_env(workspace))
    assert code == 0
    with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT status FROM turns").fetchall() == [("failed",)]


async def test_a_full_disk_at_open_is_one_line_and_an_exit(workspace: Path, shim: Path) -> None:
    code, _, _ = await run(
        workspace, frames(INITIALIZE), server_env(workspace)
    )  # made, then closed
    assert code == 0
    # Room for the lock file only: the database's shared memory cannot be made.
    code, stdout, stderr = await run(
        workspace, frames(INITIALIZE), server_env(workspace, shim, free=4096)
    )
    assert (code, stdout) == (1, b"")
    assert (
        the_one_line(stderr)
        == f"appserver: cannot start: disk I/O error (in {workspace.resolve()}/.craft)"
    )


async def test_a_face_on_a_full_disk_is_one_line_and_an_exit(workspace: Path, shim: Path) -> None:
    code, _, _ = await run(workspace, frames(INITIALIZE), server_env(workspace))
    assert code == 0
    argv = [sys.executable, "-m", "appserver", "rpc", "--workspace", str(workspace)]
    with anyio.fail_after(TIMEOUT):
        done = await anyio.run_process(
            argv, input=b"", env=server_env(workspace, shim, free=4096), check=False
        )
    assert done.returncode == 1
    assert done.stdout == b""
    line = the_one_line(done.stderr.decode(errors="replace"))
    assert line.startswith("appserver: cannot start: ")
    assert line.endswith(f"(in {workspace.resolve()}/.craft)")


async def test_zene_on_a_full_disk_answers_its_request_and_exits_4(
    workspace: Path, shim: Path
) -> None:
    code, _, _ = await run(workspace, frames(INITIALIZE), server_env(workspace))
    assert code == 0
    argv = [sys.executable, "-m", "appserver", "host", "--workspace", str(workspace)]
    request = {"request_id": "r1", "session_id": "s", "prompt": "hi"}
    with anyio.fail_after(TIMEOUT):
        done = await anyio.run_process(
            argv,
            input=json.dumps(request).encode() + b"\n",
            env=server_env(workspace, shim, free=4096),
            check=False,
        )
    assert done.returncode == 4  # zene's "runtime failure"
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr and "cannot start:" in stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["ok"] is False and answer["error_message"].startswith("cannot start: ")


async def test_a_damaged_database_is_one_line_and_an_exit(workspace: Path) -> None:
    craft = workspace / ".craft"
    craft.mkdir()
    (craft / "appserver.db").write_bytes(b"not SQLite at all\n" * 400)
    code, stdout, stderr = await run(workspace, frames(INITIALIZE), server_env(workspace))
    assert (code, stdout) == (1, b"")
    assert the_one_line(stderr) == (
        "appserver: cannot start: the database is damaged: file is not a database"
        f" (in {workspace.resolve()}/.craft)"
    )


def test_what_counts_as_the_disk_failing() -> None:
    full = sqlite3.connect(":memory:")
    full.execute("PRAGMA max_page_count = 1")  # only to get SQLite's own SQLITE_FULL error
    with pytest.raises(sqlite3.OperationalError) as caught:
        full.execute("CREATE TABLE t (x)")
    assert disk_failure(caught.value) == "database or disk is full"
    assert disk_failure(OSError(errno.ENOSPC, "No space left on device")) == (
        "No space left on device"
    )
    wrapped = ExceptionGroup("task group", [OSError(errno.EROFS, "Read-only file system")])
    assert disk_failure(wrapped) == "Read-only file system"
    assert disk_failure(StorageFailed("disk I/O error")) == "disk I/O error"
    # Bugs and other refusals are not the disk: they keep their traceback.
    assert disk_failure(ValueError("bad")) is None
    assert disk_failure(OSError(errno.EACCES, "Permission denied")) is None
    assert disk_failure(sqlite3.OperationalError("no such table: t")) is None
