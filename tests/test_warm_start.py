"""``APPSERVER_KEEP_WARM``: a stdio door launched again is forked by a warm
parent onto the launcher's own streams (appserver/warm_launch.py,
appserver/warm_parent.py).

Real processes, launched as clients launch them (``python -m appserver
app-server ...``, the ``appserver-codex`` script), each test with its own
``$XDG_RUNTIME_DIR`` (so its warm parents are its own; they are stopped at
the end).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from appserver import warm_common, warm_launch, warm_parent
from tests.faces.zene.test_zene_warm import PROBE
from tests.support.client import RpcClient
from tests.support.servers import ProcessStream, child_env

WAIT = 30.0
IDENTITY = {"channelName": "t", "userId": "u"}


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A private ``$XDG_RUNTIME_DIR`` (short: a socket's path has at most 107
    bytes); its warm parents are stopped at the end."""
    path = Path(tempfile.mkdtemp(prefix="fork-"))
    yield path
    for socket_path in (path / "appserver").glob("*.sock"):
        warm_common.stop(str(socket_path))
    for lock in (path / "appserver").glob("*.lock"):
        pid = lock.read_text().strip()
        if pid and warm_common.is_serving(str(lock).removesuffix(".lock")):
            os.kill(int(pid), signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def warm_env(run_dir: Path, **extra: str) -> dict[str, str]:
    """The launches' environment: offline model, warm starts on. pytest's
    PYTEST_CURRENT_TEST names the phase, and a warm parent serves only its
    own exact environment: it is left out."""
    environment = {
        name: value
        for name, value in child_env().items()
        if not name.startswith(("APPSERVER_", "OPENAI_", "ANTHROPIC_")) or name == "APPSERVER_HOME"
    }
    environment.pop("PYTEST_CURRENT_TEST", None)
    environment.update(
        XDG_RUNTIME_DIR=str(run_dir), APPSERVER_KEEP_WARM="60", APPSERVER_PROVIDER="offline"
    )
    environment.update(extra)
    return environment


def door(workspace: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "appserver", "app-server", "--workspace", str(workspace), *extra]


async def sockets_when(run_dir: Path, count: int) -> list[Path]:
    """The warm sockets, once there are ``count`` (a parent starts in the
    background of its first, cold launch)."""
    with anyio.fail_after(WAIT):
        while True:
            found = sorted((run_dir / "appserver").glob("*.sock"))
            if len(found) >= count:
                return found
            await anyio.sleep(0.02)


@asynccontextmanager
async def launched(
    command: list[str], environment: dict[str, str], cwd: Path | None = None
) -> AsyncIterator[Process]:
    process = await anyio.open_process(command, env=environment, cwd=cwd)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


@asynccontextmanager
async def initialized(
    command: list[str], environment: dict[str, str], cwd: Path | None = None
) -> AsyncIterator[tuple[Process, RpcClient]]:
    """A launched door whose client has done ``initialize`` (and ``initialized``)."""
    async with launched(command, environment, cwd) as process:
        client = RpcClient(ProcessStream(process))
        async with anyio.create_task_group() as tasks:
            await client.run(tasks)
            with anyio.fail_after(WAIT):
                await client.initialize()
            yield process, client
            tasks.cancel_scope.cancel()


async def session(
    command: list[str], environment: dict[str, str], cwd: Path | None = None
) -> tuple[int, str]:
    """initialize, thread/start and one turn, then stdin closed: (exit status,
    the turn's reply)."""
    async with initialized(command, environment, cwd) as (process, client):
        with anyio.fail_after(WAIT):
            thread = await client.request("thread/start", {"identity": IDENTITY})
            thread_id = thread["thread"]["id"]
            await client.request(
                "turn/start",
                {"threadId": thread_id, "input": [{"type": "text", "text": "hello"}]},
            )
            done = await client.wait(lambda m: m.get("method") == "turn/completed")
            reply = "".join(
                m["params"]["delta"]
                for m in client.messages
                if m.get("method") == "item/agentMessage/delta"
            )
            assert done["params"]["turn"]["status"] == "completed"
            await client.stream.close()
            code = await process.wait()
    return code, reply


async def read_all(stream: Any) -> str:
    chunks = []
    with anyio.fail_after(WAIT):
        while True:
            try:
                chunks.append(await stream.receive())
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return b"".join(chunks).decode()


async def warm_up(workspace: Path, run_dir: Path) -> Path:
    code, reply = await session(door(workspace), warm_env(run_dir))
    assert code == 0 and reply
    (found,) = await sockets_when(run_dir, 1)
    return found


async def test_a_later_launch_is_served_by_the_warm_parent(tmp_path: Path, run_dir: Path) -> None:
    socket_path = await warm_up(tmp_path, run_dir)
    for _ in range(2):
        code, reply = await session(door(tmp_path), warm_env(run_dir))
        assert code == 0
        assert reply == "You said: hello"
    assert warm_common.stop(str(socket_path)) == 2
    with anyio.fail_after(WAIT):
        while socket_path.exists():
            await anyio.sleep(0.02)


async def test_the_servers_stderr_and_exit_status_reach_the_client(
    tmp_path: Path, run_dir: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    socket_path = await warm_up(workspace, run_dir)
    shutil.rmtree(workspace)  # the same command now fails at start, in the forked child
    async with launched(door(workspace), warm_env(run_dir)) as process:
        assert process.stderr is not None and process.stdout is not None
        stderr = await read_all(process.stderr)
        with anyio.fail_after(WAIT):
            code = await process.wait()
    assert code == 2
    assert f"workspace {workspace} is not a directory" in stderr
    assert warm_common.stop(str(socket_path)) == 1


async def test_a_signal_to_the_launcher_ends_the_server_as_it_would_end_cold(
    tmp_path: Path, run_dir: Path
) -> None:
    """SIGTERM to a serving server is a clean shutdown (exit 0), cold or forked.
    (Before the server has built its event loop, a signal ends it by default,
    cold or forked alike: when that is depends on how far its start is.)"""
    endings = []
    for _ in range(2):  # cold (it starts the parent), then warm
        async with initialized(door(tmp_path), warm_env(run_dir)) as (process, client):
            with anyio.fail_after(WAIT):
                await client.request("thread/start", {"identity": IDENTITY})
                process.send_signal(signal.SIGTERM)
                endings.append(await process.wait())
        await sockets_when(run_dir, 1)
    assert endings == [0, 0]
    (socket_path,) = await sockets_when(run_dir, 1)
    assert warm_common.stop(str(socket_path)) == 1


async def test_a_server_ended_by_a_signal_ends_its_launcher_by_it(
    tmp_path: Path, run_dir: Path
) -> None:
    socket_path = await warm_up(tmp_path, run_dir)
    parent = parent_pid(socket_path)
    async with initialized(door(tmp_path), warm_env(run_dir)) as (process, _client):
        (server,) = children_of(parent)
        os.kill(server, signal.SIGKILL)
        with anyio.fail_after(WAIT):
            assert await process.wait() == -signal.SIGKILL
    assert warm_common.stop(str(socket_path)) == 1


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


async def test_killing_the_launcher_kills_its_server(tmp_path: Path, run_dir: Path) -> None:
    socket_path = await warm_up(tmp_path, run_dir)
    parent = parent_pid(socket_path)
    async with initialized(door(tmp_path), warm_env(run_dir)) as (process, _client):
        (server,) = children_of(parent)
        process.kill()
        with anyio.fail_after(WAIT):
            await process.wait()
            while server in children_of(parent):
                await anyio.sleep(0.02)
    assert warm_common.stop(str(socket_path)) == 1


async def test_another_environment_gets_its_own_parent(tmp_path: Path, run_dir: Path) -> None:
    first = await warm_up(tmp_path, run_dir)
    code, _ = await session(door(tmp_path), warm_env(run_dir, APPSERVER_TEST_MARK="other"))
    assert code == 0
    sockets = await sockets_when(run_dir, 2)
    assert warm_common.stop(str(first)) == 0
    for other in sockets:
        if other != first:
            assert warm_common.stop(str(other)) == 0


async def test_off_unless_asked(tmp_path: Path, run_dir: Path) -> None:
    environment = warm_env(run_dir)
    del environment["APPSERVER_KEEP_WARM"]
    code, _ = await session(door(tmp_path), environment)
    assert code == 0
    assert not (run_dir / "appserver").exists()


async def test_a_warm_launch_loads_only_the_standard_library(tmp_path: Path, run_dir: Path) -> None:
    """Before its server runs, and while it does: the launcher blanks its
    secrets once the server has its own (process_secrets, which needs
    ``logging``), and loads nothing else of ours."""
    command = [sys.executable, "-c", PROBE, "app-server", "--workspace", str(tmp_path)]
    environment = warm_env(run_dir)
    for _ in range(2):
        done = subprocess.run(
            command, input=b"", capture_output=True, env=environment, timeout=WAIT
        )
        assert done.returncode == 0, done.stderr
        await sockets_when(run_dir, 1)
    line = done.stderr.decode().rsplit("MODULES ", 1)[1]
    ours = {name for name in line.split() if name.split(".")[0] == "appserver"}
    assert ours == {
        "appserver",
        "appserver.launch",
        "appserver.process_secrets",
        "appserver.quick_exit",
        "appserver.startup",
        "appserver.tools",
        "appserver.tools.environment",
        "appserver.warm_common",
        "appserver.warm_launch",
    }
    for heavy in ("pydantic", "anyio", "asyncio", "argparse", "json", "socket"):
        assert heavy not in line.split()
    (socket_path,) = await sockets_when(run_dir, 1)
    assert warm_common.stop(str(socket_path)) == 1


async def test_the_codex_face_is_served_warm(tmp_path: Path, run_dir: Path) -> None:
    script = Path(sys.executable).parent / "appserver-codex"
    command = [str(script), "app-server"]
    environment = warm_env(run_dir)
    requests = [
        {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t", "version": "1"}}},
        {"method": "initialized"},
        {"id": 2, "method": "thread/start", "params": {"cwd": str(tmp_path)}},
    ]
    stdin = "".join(json.dumps(request) + "\n" for request in requests).encode()
    answers = []
    for _ in range(2):
        async with launched(command, environment, cwd=tmp_path) as process:
            assert process.stdin is not None
            await process.stdin.send(stdin)
            client = RpcClient(ProcessStream(process))
            async with anyio.create_task_group() as tasks:
                await client.run(tasks)
                with anyio.fail_after(WAIT):
                    answer = await client.wait(lambda m: m.get("id") == 2)
                    await process.stdin.aclose()
                    assert await process.wait() == 0
                tasks.cancel_scope.cancel()
            answers.append(answer)
        await sockets_when(run_dir, 1)
    assert all("thread" in answer.get("result", {}) for answer in answers), answers
    (socket_path,) = await sockets_when(run_dir, 1)
    assert warm_common.stop(str(socket_path)) == 1


def parent_pid(socket_path: Path) -> int:
    """The pid of the warm parent listening at ``socket_path`` (from its lock)."""
    return int(Path(warm_common.lock_path(str(socket_path))).read_text())


def parent_at(path: str, stamps: dict[str, int | None] | None = None) -> warm_parent.Parent:
    """A warm parent in this process, listening at ``path`` and holding its lock,
    with ``stamps`` as its modules' (default: those loaded now)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    holder = warm_common.hold_lock(path)
    assert holder is not None
    loaded = warm_parent.module_stamps() if stamps is None else stamps
    return warm_parent.Parent((listener, path, holder), 60, ["a", "appserver", "x"], loaded)


def test_a_parent_whose_code_changed_takes_no_launch(tmp_path: Path) -> None:
    path = str(tmp_path / "fork-x.sock")
    # As if a module changed since the parent loaded it.
    parent = parent_at(path, {"/nowhere/appserver/module.py": 1})
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"launch 2 1.5 0\n")
        with pytest.raises(warm_parent.Refused):
            parent._take(warm_parent.Handshake(ours, time.monotonic() + 5))
        assert parent.stopping  # and its name and lock went at once
        assert not os.path.exists(path)
        assert not warm_common.is_serving(path)
    finally:
        ours.close()
        theirs.close()


def test_keep_warm_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, seconds in (("60", 60.0), ("0.5", 0.5), ("0", 0.0), ("no", 0.0), ("inf", 0.0)):
        monkeypatch.setenv(warm_launch.KEEP_WARM_VARIABLE, value)
        assert warm_launch.keep_warm_seconds() == seconds


async def test_files_in_the_working_directory_do_not_run_in_the_warm_parent(
    tmp_path: Path, run_dir: Path
) -> None:
    """An editor runs the server in the workspace, which the agent writes: a
    module there must not run in the warm parent (it starts with ``python -P``)."""
    planted = tmp_path / "appserver"
    planted.mkdir()
    marker = tmp_path / "planted-ran"
    for module in (planted / "warm_parent.py", tmp_path / "json.py", tmp_path / "pydantic.py"):
        module.write_text(f"open({str(marker)!r}, 'w').close()\n")
    script = str(Path(sys.executable).parent / "appserver")  # the console script
    command = [script, "app-server", "--workspace", str(tmp_path)]
    for _ in range(2):  # the first starts the parent, the second is forked by it
        done = await anyio.run_process(
            command, input=b"", check=False, env=warm_env(run_dir), cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        await sockets_when(run_dir, 1)
    (socket_path,) = await sockets_when(run_dir, 1)
    assert warm_common.stop(str(socket_path)) == 1
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_openais_codex_sdk_drives_a_warm_started_face(tmp_path: Path, run_dir: Path) -> None:
    """OpenAI's Python SDK (``openai-codex``) spawns ``appserver-codex`` its own
    way for each ``Codex``; with APPSERVER_KEEP_WARM in the environment it gives
    the process, the second one is forked by the warm parent and works the same."""
    from openai_codex import Codex, CodexConfig

    config = CodexConfig(
        codex_bin=str(Path(sys.executable).parent / "appserver-codex"),
        cwd=str(tmp_path),
        env=warm_env(run_dir),
    )

    def session(prompt: str) -> str:
        with Codex(config) as codex:
            reply = codex.thread_start().run(prompt).final_response
        return str(reply)

    assert await anyio.to_thread.run_sync(session, "first") == "You said: first"
    (socket_path,) = await sockets_when(run_dir, 1)
    assert await anyio.to_thread.run_sync(session, "second") == "You said: second"
    assert warm_common.stop(str(socket_path)) == 1


async def test_launches_at_once_are_each_forked(tmp_path: Path, run_dir: Path) -> None:
    socket_path = await warm_up(tmp_path, run_dir)
    replies: list[str] = []

    async def one() -> None:
        code, reply = await session(door(tmp_path), warm_env(run_dir))
        assert code == 0
        replies.append(reply)

    async with anyio.create_task_group() as launches:
        for _ in range(4):
            launches.start_soon(one)
    assert replies == ["You said: hello"] * 4
    assert warm_common.stop(str(socket_path)) == 4
