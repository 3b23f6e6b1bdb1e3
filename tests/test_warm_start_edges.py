"""Warm starts at their edges: secrets, a stalled or killed parent, a launcher
signalled late, a directory made again, confinement, how many parents run
(appserver/warm_launch.py, appserver/warm_parent.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import anyio
import pytest

from appserver import warm_common, warm_launch, warm_parent
from appserver.tools.environment import tool_environment
from tests.support.fresh import fresh_process
from tests.test_warm_start import (
    IDENTITY,
    WAIT,
    children_of,
    door,
    initialized,
    parent_at,
    parent_pid,
    run_dir,
    session,
    sockets_when,
    warm_env,
    warm_up,
)

__all__ = ["run_dir"]  # the fixture, used here by name

SECRET = "sk-warm-secret-0123456789"
PROC_FILES = ("cmdline", "environ")


def proc_text(pid: int, name: str) -> bytes:
    return (Path("/proc") / str(pid) / name).read_bytes()


async def test_secrets_are_in_no_warm_process_s_command_line_or_environment(
    tmp_path: Path, run_dir: Path
) -> None:
    """A tool the agent runs can read ``/proc`` of every process of its user:
    the parent, the launcher and the server show no key, though the server has it."""
    environment = warm_env(run_dir, OPENAI_API_KEY=SECRET)
    command = door(tmp_path, "--api-key", SECRET)
    code, _ = await session(command, environment)
    assert code == 0
    (socket_path,) = await sockets_when(run_dir, 1)
    parent = parent_pid(socket_path)
    async with initialized(command, environment) as (process, client):
        (server,) = children_of(parent)
        with anyio.fail_after(WAIT):
            # The launcher blanks its own once its server runs: soon, not at once
            # (its command line, then its environment).
            while any(SECRET.encode() in proc_text(process.pid, name) for name in PROC_FILES):
                await anyio.sleep(0.02)
        for pid in (parent, process.pid, server):
            for name in PROC_FILES:
                assert SECRET.encode() not in proc_text(pid, name), (pid, name)
        answer = await client.request("thread/start", {"identity": IDENTITY})
        assert answer["thread"]["id"]
    assert warm_common.stop(str(socket_path)) == 1


async def test_a_stopped_parent_lets_go_of_its_socket_at_once(
    tmp_path: Path, run_dir: Path
) -> None:
    """A parent asked to stop while it has a server gives up its socket and
    lock at once: the next launch starts a new parent, the old server goes on."""
    socket_path = await warm_up(tmp_path, run_dir)
    async with initialized(door(tmp_path), warm_env(run_dir)) as (_process, client):
        assert warm_common.stop(str(socket_path)) == 1
        assert not socket_path.exists()
        assert not warm_common.is_serving(str(socket_path))
        code, reply = await session(door(tmp_path), warm_env(run_dir))  # cold
        assert code == 0 and reply
        await sockets_when(run_dir, 1)  # a new parent
        answer = await client.request("thread/start", {"identity": IDENTITY})
        assert answer["thread"]["id"]  # the old parent's server still serves
    assert warm_common.stop(str(socket_path)) == 0


async def test_a_silent_connection_does_not_hold_launches_up(tmp_path: Path, run_dir: Path) -> None:
    """A peer that connects and says nothing is dropped after the handshake's
    deadline; launches meanwhile run (cold if need be) and later ones are forked."""
    socket_path = await warm_up(tmp_path, run_dir)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(socket_path))
    try:
        code, reply = await session(door(tmp_path), warm_env(run_dir))
        assert code == 0 and reply
        with anyio.fail_after(WAIT):
            assert await anyio.to_thread.run_sync(silent.recv, 16) == b""  # dropped
    finally:
        silent.close()
    code, _ = await session(door(tmp_path), warm_env(run_dir))
    assert code == 0
    assert warm_common.stop(str(socket_path)) in (1, 2)


async def test_killing_the_launcher_kills_its_server_when_the_parent_is_gone(
    tmp_path: Path, run_dir: Path
) -> None:
    socket_path = await warm_up(tmp_path, run_dir)
    parent = parent_pid(socket_path)
    async with initialized(door(tmp_path), warm_env(run_dir)) as (process, _client):
        (server,) = children_of(parent)
        os.kill(parent, signal.SIGKILL)
        process.kill()
        with anyio.fail_after(WAIT):
            await process.wait()
            while Path(f"/proc/{server}").exists() and b"Z" not in proc_text(server, "stat"):
                await anyio.sleep(0.02)


async def test_a_directory_made_again_is_the_servers_directory(
    tmp_path: Path, run_dir: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    code, _ = await session(door(workspace), warm_env(run_dir), cwd=workspace)
    assert code == 0
    (socket_path,) = await sockets_when(run_dir, 1)
    shutil.rmtree(workspace)
    workspace.mkdir()  # the same name, another directory
    parent = parent_pid(socket_path)
    async with initialized(door(workspace), warm_env(run_dir), workspace) as (_process, client):
        (server,) = children_of(parent)
        assert os.stat(f"/proc/{server}/cwd").st_ino == workspace.stat().st_ino
        answer = await client.request("thread/start", {"identity": IDENTITY})
        assert answer["thread"]["id"]
    assert warm_common.stop(str(socket_path)) == 1


async def test_another_umask_gets_its_own_parent(tmp_path: Path, run_dir: Path) -> None:
    """A forked server's files and its tools get the umask (and limits,
    control group, namespaces) its own launcher has, never the first one's."""
    first = await warm_up(tmp_path, run_dir)
    shell = ["sh", "-c", 'umask 077 && exec "$@"', "sh", *door(tmp_path)]
    code, _ = await session(shell, warm_env(run_dir))
    assert code == 0
    sockets = await sockets_when(run_dir, 2)
    assert warm_common.stop(str(first)) == 0
    for other in sockets:
        if other != first:
            assert warm_common.stop(str(other)) == 0


async def test_variables_a_shell_sets_per_command_share_a_parent(
    tmp_path: Path, run_dir: Path
) -> None:
    socket_path = await warm_up(tmp_path, run_dir)
    volatile = warm_env(run_dir, _="/usr/bin/anything", OLDPWD="/elsewhere", SHLVL="7")
    code, _ = await session(door(tmp_path), volatile)
    assert code == 0
    assert len(await sockets_when(run_dir, 1)) == 1
    assert warm_common.stop(str(socket_path)) == 1


async def test_no_parent_starts_past_the_most_a_user_may_have(
    tmp_path: Path, run_dir: Path
) -> None:
    directory = run_dir / "appserver"
    directory.mkdir(mode=0o700)
    held = [
        warm_common.take_slot(str(directory), "fork", warm_launch.MOST_PARENTS)
        for number in range(warm_launch.MOST_PARENTS)
    ]
    try:
        assert warm_common.take_slot(str(directory), "fork", warm_launch.MOST_PARENTS) is None
        code, reply = await session(door(tmp_path), warm_env(run_dir))
        assert code == 0 and reply
        assert not list(directory.glob("*.sock"))  # ran cold, started none
    finally:
        for holder in held:
            assert holder is not None
            os.close(holder)


def test_a_late_signal_to_the_launcher_is_harmless(tmp_path: Path) -> None:
    """A signal that reaches the launcher after its server ended (and was
    reaped) is dropped: the launcher still ends with the server's status, and
    no other process that took the pid gets it."""
    script = textwrap.dedent(
        """
        import os, signal, socket, subprocess, sys, threading
        from appserver import warm_launch
        ended = subprocess.Popen(["true"])
        server = os.pidfd_open(ended.pid)
        ended.wait()  # reaped: its pid is free for another process
        ours, theirs = socket.socketpair()
        def late():
            os.kill(os.getpid(), signal.SIGTERM)
            theirs.sendall(b"exit 3\\n")
        threading.Timer(0.1, late).start()
        sys.exit(warm_launch._follow(ours, bytearray(), ended.pid, server))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=WAIT, cwd=tmp_path
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr == b""


def test_a_parent_with_a_thread_refuses_before_ready(tmp_path: Path) -> None:
    """Refused before ``ready``: the launcher has handed nothing over and runs cold."""
    parent = parent_at(str(tmp_path / "fork-x.sock"))
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"launch 2 1.5 4\nA=1\0")
        with pytest.raises(warm_parent.Refused):
            parent._take(warm_parent.Handshake(ours, time.monotonic() + 5))
        ours.close()
        assert theirs.recv(16) == b""  # no "ready"
    finally:
        release.set()
        other.join()
        parent.close_door()
        theirs.close()


def test_a_parent_checks_every_library_it_loaded() -> None:
    """An upgraded dependency makes the parent stale as appserver's own code does."""
    import pydantic

    assert pydantic.__file__ in warm_parent.module_stamps()


def test_the_agents_commands_do_not_inherit_warm_starts() -> None:
    environment = {"APPSERVER_KEEP_WARM": "60", "APPSERVER_WARM_SOCKET": "/x", "HOME": "/h"}
    assert tool_environment(environ=environment) == {"HOME": "/h"}


def test_a_header_too_large_or_too_slow_is_dropped() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"launch 2 1.5 %d\n" % (warm_parent.HEADER_MOST + 1))
        too_large = warm_parent.Handshake(ours, time.monotonic() + 5)
        with pytest.raises(ValueError):
            too_large.header(too_large.line())
        theirs.sendall(b"launch 2 1.5 10\nA=1\0")  # 5 bytes of 10 promised, then silence
        started = time.monotonic()
        with pytest.raises((ValueError, OSError)):
            handshake = warm_parent.Handshake(ours, time.monotonic() + 0.3)
            handshake.header(handshake.line())
        assert time.monotonic() - started < WAIT
    finally:
        ours.close()
        theirs.close()


def test_abbreviated_secret_options_are_found() -> None:
    """argparse takes ``--api-k S`` for ``--api-key S``: the launcher blanks it too."""
    from appserver.process_secrets import flag_secrets

    argv = ["app-server", "--api-k", "one", "--tok=two", "--openai-api-key", "three", "-x", "--"]
    assert flag_secrets(argv) == ["one", "two", "three"]


def test_the_identity_covers_user_and_groups() -> None:
    identity = warm_common.process_identity()
    for line in ("Umask:", "Uid:", "Gid:", "Groups:", "NoNewPrivs:"):
        assert line in identity


def test_a_year_is_the_longest_idle_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm_launch.KEEP_WARM_VARIABLE, "1e10")
    assert warm_launch.keep_warm_seconds() == warm_launch.MOST_IDLE


def test_an_entry_without_a_name_is_left_out_of_the_environment() -> None:
    ours, theirs = socket.socketpair()
    try:
        block = b"=weird\0A=1\0"
        theirs.sendall(b"launch 2 1.5 %d\n" % len(block) + block)
        handshake = warm_parent.Handshake(ours, time.monotonic() + 5)
        assert handshake.header(handshake.line()) == (1.5, {b"A": b"1"})
    finally:
        ours.close()
        theirs.close()


def test_a_handshake_dropped_after_ready_tells_the_launcher(tmp_path: Path) -> None:
    """Past ``ready`` the launcher may have committed: it is told ``refused``
    (and runs cold) rather than left to think the parent died with its launch."""
    path = str(tmp_path / "fork-x.sock")
    parent = parent_at(path)
    launcher = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        launcher.connect(path)
        launcher.sendall(b"launch 2 1.5 0\n")  # then never "go": the deadline passes
        assert parent._accept() is None
        answer = b""
        while chunk := launcher.recv(64):
            answer += chunk
        assert answer == b"ready\nrefused\n"
    finally:
        launcher.close()
        parent.close_door()


async def test_a_parent_that_ended_is_no_zombie_of_the_first_server(
    tmp_path: Path, run_dir: Path
) -> None:
    """The first, cold launch starts the parent as its child; the parent ending
    (idle) while that server still runs leaves no zombie behind."""
    environment = warm_env(run_dir, APPSERVER_KEEP_WARM="0.5")
    async with initialized(door(tmp_path), environment) as (process, client):
        (socket_path,) = await sockets_when(run_dir, 1)
        parent = parent_pid(socket_path)
        with anyio.fail_after(WAIT):
            while Path(f"/proc/{parent}").exists():
                await anyio.sleep(0.02)
        answer = await client.request("thread/start", {"identity": IDENTITY})
        assert answer["thread"]["id"]
        assert parent not in children_of(process.pid)


def test_a_warm_process_writes_no_bytecode_when_its_launcher_would_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``python -B``: the environment alone would not pass it on to the warm
    parent or a Zene warm process (nor, so, to the compiled dataclass methods)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert warm_common.python_flags() == ["-P", "-B"]
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert warm_common.python_flags() == ["-P"]


def test_a_warm_parent_preloads_what_a_dotcraft_session_loads(tmp_path: Path) -> None:
    """A DotCraft door's warm parent loads every family, those that wait for
    their first use too: a session forked from it (a thread, a turn, a call to
    each waiting family) imports nothing of appserver's itself but the test's
    own transport."""
    code = """
import anyio, pathlib, sys
from appserver.warm_parent import preload
preload("appserver", ["app-server"])
before = {name for name in sys.modules if name.startswith("appserver.")}
from tests.support.servers import running_server
from tests.support.turns import new_thread, run_turn

async def main():
    workspace = pathlib.Path(sys.argv[1])
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await run_turn(client, await new_thread(client), "hello")
        for method in ("model/list", "command/list", "grant/list", "prompt/read",
                       "automation/task/list", "channel/list", "cron/list",
                       "subagent/profiles/list"):
            await client.request(method, {})

anyio.run(main)
print(sorted(name for name in sys.modules if name.startswith("appserver.") and name not in before))
"""
    loaded = fresh_process(code, tmp_path).strip()
    assert loaded == "['appserver.transport.listen_options', 'appserver.transport.memory']"


@pytest.mark.parametrize("argv", [["app-server"], ["host", "--single-request"], ["acp"]])
def test_a_warm_parent_preloads_what_a_cold_process_loads_at_first_use(
    argv: list[str], tmp_path: Path
) -> None:
    """Background terminals' and editor families' models and the SubAgents'
    runtime, which a cold process loads at their first use: every forked server
    has them ready, and the parent's stamps cover their files."""
    code = f"""
import sys
from appserver.warm_parent import module_stamps, preload
preload("appserver", {argv!r})
stamps = module_stamps()
print(all(sys.modules[name].__file__ in stamps for name in (
    "appserver.protocol.terminals",
    "appserver.protocol.editor_families",
    "appserver.tools.editor_families",
    "appserver.runtime.subagents",
    "appserver.runtime.subagent_external",
)))
"""
    assert fresh_process(code, tmp_path).strip() == "True"


def test_a_signal_before_the_server_s_pid_is_known_is_passed_on_then(tmp_path: Path) -> None:
    """From ``go`` the server may answer on the launcher's streams before the
    launcher has its pid: a SIGTERM then (a supervisor that saw an answer) is
    held and passed on, not the launcher's default death; if the parent
    refuses after all, the signal acts as it would have."""
    script = textwrap.dedent(
        """
        import os, signal, sys
        from appserver import warm_launch
        got = []
        warm_launch._hold_signals()
        os.kill(os.getpid(), signal.SIGTERM)
        print("held", flush=True)
        if sys.argv[1] == "passed":
            warm_launch._release_signals_to(lambda signum, frame: got.append(signum))
        else:
            warm_launch._release_signals_to(None)
        print(got, flush=True)
        """
    )

    def run(how: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, how],
            capture_output=True,
            text=True,
            timeout=WAIT,
            cwd=tmp_path,
        )

    passed = run("passed")
    assert (passed.returncode, passed.stdout) == (0, f"held\n[{int(signal.SIGTERM)}]\n")
    refused = run("refused")
    assert (refused.returncode, refused.stdout) == (-signal.SIGTERM, "held\n")
