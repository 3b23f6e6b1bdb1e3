"""``appserver host ... --single-request --keep-warm N``: one-shots handed to a
warm process of the same command (appserver/faces/zene/warm.py).

Real processes as clawbridge spawns them (``python -m appserver host ...``, the
request on stdin, stdin closed, stdout and stderr read to their end). Each test
gets its own ``$XDG_RUNTIME_DIR``, so its warm processes are its own; they are
stopped when it ends.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from appserver.faces.zene import warm
from tests.faces.zene.test_face_zene import (
    ONE_SHOT,
    accepted_by_clawbridge,
    clawbridge_request,
    database,
    env,
    host_command,
    line,
    one_shot,
    session_turns,
)

KEEP = ("--keep-warm", "60")


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A private ``$XDG_RUNTIME_DIR`` (short: a socket's path has at most 107
    bytes, pytest's directories are longer); its warm processes are stopped at
    the end."""
    path = Path(tempfile.mkdtemp(prefix="warm-"))
    yield path
    stop_all(path)
    shutil.rmtree(path, ignore_errors=True)


def stop_all(path: Path) -> None:
    """Stop every warm process there; one still alive 10 s later is killed."""
    for socket_path in (path / "appserver").glob("*.sock"):
        warm.stop(str(socket_path))
    deadline = time.monotonic() + 10
    for lock in (path / "appserver").glob("*.lock"):
        while warm.is_serving(str(lock).removesuffix(".lock")):
            pid = lock.read_text().strip()  # empty while it starts
            if time.monotonic() > deadline and pid:
                os.kill(int(pid), signal.SIGKILL)
                break
            time.sleep(0.05)


def warm_env(run_dir: Path, **extra: str) -> dict[str, str]:
    """The one-shots' environment. pytest's PYTEST_CURRENT_TEST names the phase
    (setup, call), and a warm process serves only one-shots of exactly its own
    environment: it is left out."""
    environment = env(XDG_RUNTIME_DIR=str(run_dir), **extra)
    environment.pop("PYTEST_CURRENT_TEST", None)
    return environment


async def sockets_when(run_dir: Path, count: int) -> list[Path]:
    """The warm sockets, once there are ``count`` of them (a warm process starts
    in the background after its first one-shot has answered)."""
    with anyio.fail_after(30):
        while True:
            found = sorted((run_dir / "appserver").glob("*.sock"))
            if len(found) >= count:
                return found
            await anyio.sleep(0.02)


async def warm_up(workspace: Path, run_dir: Path, *args: str) -> Path:
    """A first (cold) one-shot with ``--keep-warm``; the socket of the warm
    process it leaves."""
    code, answers, stderr = await one_shot(
        workspace,
        line(clawbridge_request(session_id="first")),
        *(args or (*ONE_SHOT, *KEEP)),
        environment=warm_env(run_dir),
    )
    assert accepted_by_clawbridge(code, answers), stderr
    (found,) = await sockets_when(run_dir, 1)
    return found


@pytest.fixture
async def warm_socket(workspace: Path, run_dir: Path) -> AsyncIterator[Path]:
    yield await warm_up(workspace, run_dir)


async def test_later_one_shots_are_answered_by_the_warm_process(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    for index in range(3):
        request = clawbridge_request(session_id=f"s{index}", prompt=f"hello {index}")
        code, answers, stderr = await one_shot(
            workspace, line(request), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
        )
        assert accepted_by_clawbridge(code, answers), stderr
        assert answers[0]["request_id"] == request["request_id"]
        assert answers[0]["text"] == f"You said: hello {index}"
        assert session_turns(workspace, f"s{index}")[0][1] == "completed"
    assert warm.stop(str(warm_socket)) == 3
    assert not warm_socket.exists()


# The modules loaded at the end: written by an exit handler, which runs
# before the process ends (appserver/quick_exit.py).
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write(\n"
    "    'MODULES ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
    "from appserver.launch import main\n"
    "raise SystemExit(main())\n"
)


async def probed_one_shot(workspace: Path, run_dir: Path) -> list[str]:
    """A one-shot run through :data:`PROBE`: the modules it had loaded at its end
    (after checking it answered ok)."""
    command = [sys.executable, "-c", PROBE, *host_command(workspace, *ONE_SHOT, *KEEP)[3:]]
    done = await anyio.run_process(
        command, input=line(clawbridge_request()), check=False, env=warm_env(run_dir)
    )
    assert done.returncode == 0
    assert json.loads(done.stdout)["ok"] is True
    return done.stderr.decode().split("MODULES ")[1].split()


async def test_a_warm_one_shot_loads_only_the_standard_library(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    modules = await probed_one_shot(workspace, run_dir)
    ours = [name for name in modules if name.startswith("appserver")]
    assert sorted(ours) == [
        "appserver",
        "appserver.faces",
        "appserver.faces.zene",
        "appserver.faces.zene.warm",
        "appserver.launch",
        "appserver.quick_exit",
        "appserver.startup",
        "appserver.warm_common",
    ]
    for heavy in ("pydantic", "anyio", "asyncio", "argparse", "json", "logging", "socket"):
        assert heavy not in modules
    assert warm.stop(str(warm_socket)) == 1


@pytest.mark.parametrize(
    ("stdin", "args", "want_code", "want_error"),
    [
        (b"not json\n", ONE_SHOT, 0, "request is not valid JSON"),
        (b"not json\n", ("--protocol", "v1", "--single-request"), 2, "request is not valid JSON"),
        (
            b'{"request_id":"r","session_id":"s","prompt":"' + b"x" * 500 + b'"}\n',
            (*ONE_SHOT, "--max-input-bytes", "400"),
            0,
            "exceeds --max-input-bytes (400 bytes)",
        ),
        (b'{"request_id":"r","session_id":"s","prompt":"\xff"}\n', ONE_SHOT, 0, "UTF-8"),
    ],
)
async def test_invalid_requests_get_the_cold_answer_and_status(
    workspace: Path,
    run_dir: Path,
    stdin: bytes,
    args: tuple[str, ...],
    want_code: int,
    want_error: str,
) -> None:
    socket_path = await warm_up(workspace, run_dir, *args, *KEEP)
    code, answers, _ = await one_shot(workspace, stdin, *args, *KEEP, environment=warm_env(run_dir))
    assert code == want_code
    (answer,) = answers
    assert answer["error_code"] == "INVALID_REQUEST"
    assert want_error in answer["error_message"]
    assert warm.stop(str(socket_path)) == 1


@pytest.mark.parametrize("stdin", [b"", b"\n  \n"])
async def test_no_request_exits_2_with_its_reason_on_stderr(
    workspace: Path, run_dir: Path, warm_socket: Path, stdin: bytes
) -> None:
    code, answers, stderr = await one_shot(
        workspace, stdin, *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert (code, answers) == (2, [])
    assert "no request: end of input before a request line" in stderr
    assert warm.stop(str(warm_socket)) == 1


async def test_stdin_timeout_counts_for_a_warm_one_shot(workspace: Path, run_dir: Path) -> None:
    args = (*ONE_SHOT, "--stdin-timeout-ms", "300", *KEEP)
    socket_path = await warm_up(workspace, run_dir, *args)
    command = host_command(workspace, *args)
    async with await anyio.open_process(command, env=warm_env(run_dir)) as process:
        # stdin stays open and empty: the warm process gives up after 300 ms.
        with anyio.fail_after(30):
            code = await process.wait()
        assert process.stderr is not None and process.stdout is not None
        stderr = (await process.stderr.receive()).decode()
    assert code == 2
    assert "no request on stdin within 300 ms" in stderr
    assert warm.stop(str(socket_path)) == 1


async def test_timeout_ms_interrupts_a_warm_turn(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    request = clawbridge_request(prompt="?stream 1000\n?delay 20", timeout_ms=1500)
    code, answers, _ = await one_shot(
        workspace, line(request), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert code == 0
    assert answers[0]["error_code"] == "TIMEOUT"
    assert session_turns(workspace, request["session_id"])[-1][1] == "cancelled"
    assert warm.stop(str(warm_socket)) == 1


async def test_timeout_ms_counts_from_the_one_shots_spawn(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    """A request written after its timeout_ms has passed since the spawn is a
    TIMEOUT, as in a cold one-shot, though the warm process read it at once."""
    request = clawbridge_request(prompt="hello", timeout_ms=1000)
    command = host_command(workspace, *ONE_SHOT, *KEEP)
    async with await anyio.open_process(command, env=warm_env(run_dir)) as process:
        assert process.stdin is not None and process.stdout is not None
        await anyio.sleep(1.2)  # the scenario: the client writes late, not a wait
        await process.stdin.send(line(request))
        await process.stdin.aclose()
        with anyio.fail_after(30):
            code = await process.wait()
        answer = json.loads(await process.stdout.receive())
    assert code == 0
    assert answer["error_code"] == "TIMEOUT"
    assert warm.stop(str(warm_socket)) == 1


async def test_one_session_in_order_and_sessions_at_once(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    results: dict[str, tuple[int, str]] = {}

    async def ask(session: str, prompt: str) -> None:
        request = clawbridge_request(session_id=session, prompt=prompt)
        code, answers, _ = await one_shot(
            workspace, line(request), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
        )
        results[prompt] = (code, answers[0]["text"])

    async with anyio.create_task_group() as group:
        for index in range(3):
            group.start_soon(ask, "shared", f"?stream 50\n?delay 5\nturn {index}")
            group.start_soon(ask, f"own{index}", f"own {index}")
    assert all(code == 0 for code, _ in results.values())
    assert all(text for _, text in results.values())
    shared = session_turns(workspace, "shared")
    assert [status for _, status in shared] == ["completed"] * 3
    for index in range(3):
        assert session_turns(workspace, f"own{index}")[0][1] == "completed"
    assert warm.stop(str(warm_socket)) == 6


async def test_another_environment_gets_its_own_warm_process(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    other = warm_env(run_dir, EXTRA_SETTING="1")
    request = line(clawbridge_request(session_id="other"))
    code, answers, _ = await one_shot(workspace, request, *ONE_SHOT, *KEEP, environment=other)
    assert accepted_by_clawbridge(code, answers)
    sockets = await sockets_when(run_dir, 2)
    # The first warm process served nothing: the command differed.
    assert warm.stop(str(warm_socket)) == 0
    (second,) = [path for path in sockets if path != warm_socket]
    code, answers, _ = await one_shot(workspace, request, *ONE_SHOT, *KEEP, environment=other)
    assert accepted_by_clawbridge(code, answers)
    assert warm.stop(str(second)) == 1


async def test_without_keep_warm_no_warm_process_starts(workspace: Path, run_dir: Path) -> None:
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)
    assert not (run_dir / "appserver").exists()


async def test_a_runtime_directory_open_to_others_is_not_used(
    workspace: Path, run_dir: Path
) -> None:
    shared = run_dir / "appserver"
    shared.mkdir()
    shared.chmod(0o777)
    for _ in range(2):
        code, answers, _ = await one_shot(
            workspace,
            line(clawbridge_request()),
            *ONE_SHOT,
            *KEEP,
            environment=warm_env(run_dir),
        )
        assert accepted_by_clawbridge(code, answers)
    assert list(shared.iterdir()) == []


async def test_the_warm_process_ends_once_idle(workspace: Path, run_dir: Path) -> None:
    args = (*ONE_SHOT, "--keep-warm", "3")
    socket_path = await warm_up(workspace, run_dir, *args)
    with anyio.fail_after(30):
        while warm.is_serving(str(socket_path)):
            await anyio.sleep(0.05)
    assert not socket_path.exists()
    # The next one-shot runs cold and leaves a new warm process.
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), *args, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)
    await sockets_when(run_dir, 1)


async def test_a_killed_warm_process_fails_its_request_and_is_replaced(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    pid = int(Path(warm.lock_path(str(warm_socket))).read_text())
    request = clawbridge_request(prompt="?stream 1000\n?delay 20")
    command = host_command(workspace, *ONE_SHOT, *KEEP)
    async with await anyio.open_process(command, env=warm_env(run_dir)) as process:
        assert process.stdin is not None and process.stderr is not None
        await process.stdin.send(line(request))
        await process.stdin.aclose()
        with anyio.fail_after(30):  # the turn has started (its thread is there)
            while not (workspace / ".craft").exists() or not session_rows(workspace):
                await anyio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(30):
            code = await process.wait()
        stderr = (await process.stderr.receive()).decode()
    assert code == 4
    assert "the warm process ended before answering" in stderr
    stale = warm_socket.stat().st_ctime_ns  # left behind by the killed process
    # The next one-shot finds nobody there, runs cold and starts a new one.
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)
    with anyio.fail_after(30):  # the new one listens on a new socket of that name
        while not warm_socket.exists() or warm_socket.stat().st_ctime_ns == stale:
            await anyio.sleep(0.05)
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)
    assert warm.stop(str(warm_socket)) == 1


def session_rows(workspace: Path) -> list[tuple[str]]:
    """The running turns (none before the first has started)."""
    with database(workspace) as db:
        try:
            return list(db.execute("SELECT id FROM turns WHERE status = 'running'"))
        except sqlite3.OperationalError:
            return []


def test_a_runtime_directory_too_long_for_a_socket_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/tmp/" + "d" * 100)
    found = warm.runtime_dir(create=False)
    assert found in (None, f"/tmp/appserver-{os.getuid()}")


@pytest.mark.skipif(
    os.getuid() != 0 or not os.path.exists("/usr/bin/python3"),
    reason="connects as another user (needs root, and a system Python that user can run)",
)
def test_a_connection_from_another_user_is_not_ours(tmp_path: Path) -> None:
    """Both ends check the other's user (SO_PEERCRED): here the warm side's check
    of a client running as nobody, through a socket open to everyone."""
    import socket as sockets

    open_dir = Path(tempfile.mkdtemp(prefix="peer-"))
    try:
        open_dir.chmod(0o777)
        path = str(open_dir / "s.sock")
        with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as listener:
            listener.bind(path)
            os.chmod(path, 0o777)
            listener.listen()
            client = subprocess_as_nobody(
                f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r}); s.recv(1)"
            )
            accepted, _ = listener.accept()
            with accepted:
                assert not warm.peer_is_us(accepted)
            client.wait(timeout=30)
        with (
            sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as ours,
            sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as listener,
        ):
            listener.bind(path + "2")
            listener.listen()
            ours.connect(path + "2")
            accepted, _ = listener.accept()
            with accepted:
                assert warm.peer_is_us(accepted)
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)


def subprocess_as_nobody(code: str) -> subprocess.Popen[bytes]:
    """The system's Python (this one may be under a directory nobody cannot enter)."""
    return subprocess.Popen(["/usr/bin/python3", "-c", code], user=65534, group=65534)


def warm_pid(socket_path: Path) -> int:
    return int(Path(warm.lock_path(str(socket_path))).read_text())


async def test_files_in_the_working_directory_do_not_run_in_the_warm_process(
    workspace: Path, run_dir: Path
) -> None:
    """clawbridge runs the command in some directory, often the workspace, which
    the agent writes: a module there must not run in the warm process (it
    starts with ``python -P``)."""
    planted = workspace / "appserver"
    planted.mkdir()
    marker = workspace / "planted-ran"
    (planted / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (workspace / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    script = str(Path(sys.executable).parent / "appserver")  # the console script
    command = [script, "host", *ONE_SHOT, *KEEP]
    for _ in range(2):  # the first starts the warm process, the second is served by it
        done = await anyio.run_process(
            command,
            input=line(clawbridge_request()),
            check=False,
            env=warm_env(run_dir),
            cwd=workspace,
        )
        assert done.returncode == 0, done.stderr
        if not list((run_dir / "appserver").glob("*.sock")):
            await sockets_when(run_dir, 1)
    (socket_path,) = await sockets_when(run_dir, 1)
    assert warm.stop(str(socket_path)) == 1
    assert not marker.exists()


async def test_a_bad_client_does_not_end_the_warm_process(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    """Headers it cannot use and clients that vanish at any point end their
    own connection only."""
    pid = warm_pid(warm_socket)
    headers = [
        b'{"v":1,"started":1' + b"0" * 400 + b"}\n",  # an integer too large for a float
        b"[" * 200_000 + b"\n",  # nested past the recursion limit
        b'{"v":1,"started":"soon"}\n',
        b'{"v":2,"started":1.0}\n',
        b"\xff\xfe\n",
    ]
    for header in headers:
        connection = warm.connect(str(warm_socket))
        assert connection is not None
        connection.sendall(header)
        connection.close()
    # One that leaves right after its header, before it is taken; one that
    # leaves mid-request, after sending half a line.
    for extra in (b"", b'{"request_id":"r","session_id":"s","pro'):
        connection = warm.connect(str(warm_socket))
        assert connection is not None
        connection.sendall(b'{"v":1,"started":%r}\n' % time.monotonic() + extra)
        connection.close()
    # Still there, and serving: a one-shot it answers loads no runtime of its own.
    assert "pydantic" not in await probed_one_shot(workspace, run_dir)
    assert warm_pid(warm_socket) == pid


async def test_a_warm_process_that_does_not_take_the_request_is_passed_over(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    pid = warm_pid(warm_socket)
    os.kill(pid, signal.SIGSTOP)
    try:
        code, answers, _ = await one_shot(
            workspace, line(clawbridge_request()), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
        )
        assert accepted_by_clawbridge(code, answers)  # answered cold
    finally:
        os.kill(pid, signal.SIGCONT)
    assert warm.stop(str(warm_socket)) == 0


async def test_a_warm_process_that_cannot_start_leaves_the_answer_as_it_was(
    workspace: Path, run_dir: Path
) -> None:
    first = line(clawbridge_request(session_id="first"))
    await one_shot(workspace, first, *ONE_SHOT, *KEEP, environment=warm_env(run_dir))
    (socket_path,) = await sockets_when(run_dir, 1)
    warm.stop(str(socket_path))
    stop_all(run_dir)
    log_path = Path(warm.log_path(str(socket_path)))
    log_path.unlink()
    log_path.mkdir()  # its log cannot be opened: no warm process can be started
    code, answers, stderr = await one_shot(
        workspace, line(clawbridge_request()), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers), stderr
    assert "could not start a warm process" in stderr


async def test_changed_settings_end_the_warm_process(
    workspace: Path, run_dir: Path, warm_socket: Path
) -> None:
    """A warm process reads the settings once; when they change, the next
    one-shot runs cold (reading them again) and the warm process ends."""
    (workspace / ".craft" / "config.json").write_text("{}\n")
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)
    with anyio.fail_after(30):
        while warm.is_serving(str(warm_socket)) and warm_socket.exists():
            await anyio.sleep(0.05)
