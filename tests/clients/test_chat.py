"""`appserver-client chat` driven through a pseudo-terminal (pexpect) against
real servers: one it spawns over stdio, and a WebSocket server subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect
import pytest

BIN = Path(sys.executable).parent
CHAT = str(BIN / "appserver-client")
TIMEOUT = 30  # generous: a loaded 2-core machine starts the chat and its server slowly
APPROVAL = r"\[c\]ancel turn\? "


def chat_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("APPSERVER_TOKEN", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["TERM"] = "dumb"
    return env


@contextmanager
def chat(*args: str, cwd: Path) -> Iterator[pexpect.spawn]:
    child = pexpect.spawn(
        CHAT,
        ["chat", *args],
        cwd=str(cwd),
        env=chat_env(),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 200),
    )
    try:
        yield child
    finally:
        if child.isalive():
            child.terminate(force=True)


def finish(child: pexpect.spawn) -> int:
    """Wait for the chat to exit; its exit status."""
    child.expect(pexpect.EOF)
    child.close()
    assert child.signalstatus is None
    return int(child.exitstatus)


def test_chat_new_thread_message_approval_and_threads(workspace: Path) -> None:
    started = time.monotonic()
    with chat(cwd=workspace) as child:
        child.expect("New thread (thread_\\S+)\\. Type a message\\.")
        thread_id = child.match.group(1)
        child.expect_exact("you> ")
        child.sendline("hello")
        child.expect_exact("You said: hello")
        child.expect_exact("you> ")
        child.sendline("!echo hi")
        child.expect_exact("Approval needed (shell): echo hi")
        child.expect(APPROVAL)
        child.sendline("y")
        child.expect_exact("[approval] accept\r")
        child.expect_exact("The command exited with code 0.")
        child.expect_exact("you> ")
        child.sendline("/threads")
        child.expect(r"\* +1\) .*" + re.escape(thread_id))
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
    assert time.monotonic() - started < 15


def test_chat_switch_threads_interrupt_and_cancel(workspace: Path) -> None:
    with chat("--workspace", str(workspace), cwd=workspace.parent) as child:
        child.expect("New thread (thread_\\S+)\\.")
        first = child.match.group(1)
        child.expect_exact("you> ")
        child.sendline("remember me")
        child.expect_exact("You said: remember me")
        child.expect_exact("you> ")
        child.sendline("/new")
        child.expect("New thread (thread_\\S+)\\.")
        assert child.match.group(1) != first
        child.expect_exact("you> ")
        child.sendline("/threads")
        child.expect(r" 2\) .*" + re.escape(first))  # newest first: the old one is 2
        child.expect_exact("you> ")
        child.sendline("/resume 2")
        child.expect_exact(f"({first}, 1 turn(s))")
        child.expect_exact("you: remember me")
        child.expect_exact("you> ")
        # Ctrl-C while a command runs interrupts the turn.
        child.sendline("!sleep 5")
        child.expect(APPROVAL)
        child.sendline("s")
        child.expect_exact("[approval] acceptForSession")
        child.sendintr()
        child.expect_exact("[turn cancelled: interrupted]")
        child.expect_exact("you> ")
        # Ctrl-C at an approval prompt cancels the turn.
        child.sendline("/new")
        child.expect_exact("you> ")
        child.sendline("!echo x")
        child.expect(APPROVAL)
        child.sendintr()
        child.expect_exact("[turn cancelled: approvalCancelled]")
        child.expect_exact("you> ")
        child.sendeof()  # Ctrl-D leaves
        child.expect_exact("Bye.")
        assert finish(child) == 0


@contextmanager
def websocket_server(workspace: Path, token: str, port: int = 0) -> Iterator[str]:
    """A real `appserver` subprocess listening on ``port`` (0: a free one); its
    URL (no /ws)."""
    argv = [str(BIN / "appserver"), "app-server", "--listen", f"ws://127.0.0.1:{port}"]
    argv += ["--workspace", str(workspace), "--token", token, "--log-level", "warning"]
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=chat_env(),
        text=True,
    )
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + TIMEOUT
        url = None
        while url is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            found = re.search(r"listening on (ws://\S+)", line)
            url = found.group(1) if found else None
        assert url is not None, "the server did not start"
        yield url.removesuffix("/ws")
    finally:
        process.terminate()
        process.wait(TIMEOUT)
        if process.stderr is not None:
            process.stderr.close()


def test_chat_over_websocket_with_token_and_thread_picker(workspace: Path, tmp_path: Path) -> None:
    with websocket_server(workspace, "tok-123") as url:
        with chat("--url", url, "--token", "tok-123", cwd=tmp_path) as child:
            child.expect_exact(f"at {url}.")
            child.expect_exact("New thread")
            child.expect_exact("you> ")
            child.sendline("over the socket")
            child.expect_exact("You said: over the socket")
            child.expect_exact("you> ")
            child.sendline("/quit")
            assert finish(child) == 0
        # A second session offers the thread; pick it by number.
        with chat("--url", url, cwd=tmp_path) as child:
            child.expect(r"refused the token \(none was given\) \(HTTP 401\)")
            assert finish(child) == 1
        with chat("--url", url, "--token", "tok-123", cwd=tmp_path) as child:
            child.expect_exact("Recent threads:")
            child.expect(r" 1\) ")
            child.expect_exact("press Enter for a new thread: ")
            child.sendline("1")
            child.expect_exact("you: over the socket")
            child.expect_exact("agent: You said: over the socket")
            child.expect_exact("you> ")
            child.sendintr()  # Ctrl-C at the prompt asks for a second one
            child.expect_exact("(Ctrl-C again to quit, or Ctrl-D)")
            child.sendintr()
            assert finish(child) == 0


def test_chat_without_a_subcommand_shows_help(tmp_path: Path) -> None:
    done = subprocess.run([CHAT], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 2 and "chat" in done.stderr


@pytest.mark.parametrize("answer", ["n", "a"])
def test_chat_approval_answers(workspace: Path, answer: str) -> None:
    with chat(cwd=workspace) as child:
        child.expect_exact("you> ")
        child.sendline("!echo hi")
        child.expect(APPROVAL)
        child.sendline("maybe")
        child.expect(r"Please answer y, s, (w, )?a, n or c\.")
        child.expect(APPROVAL)
        child.sendline(answer)
        if answer == "n":
            child.expect_exact("The shell call was declined.")
        else:
            child.expect_exact("[approval] acceptAlways")
            child.expect_exact("The command exited with code 0.")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0


def test_chat_says_once_when_the_connection_drops_and_when_it_is_back(
    workspace: Path, tmp_path: Path
) -> None:
    with websocket_server(workspace, "tok-9") as url:
        port = int(url.rsplit(":", 1)[1])
        child_context = chat("--url", url, "--token", "tok-9", cwd=tmp_path)
        child = child_context.__enter__()
        child.expect_exact("you> ")
        child.sendline("before")
        child.expect_exact("You said: before")
        child.expect_exact("you> ")
    try:
        # The server is gone: one notice, however many reconnect attempts fail.
        child.expect_exact("(connection lost; reconnecting…)")
        with websocket_server(workspace, "tok-9", port):
            child.expect_exact("(reconnected)")
            assert "connection lost" not in child.before
            child.sendline("after")
            child.expect_exact("You said: after")
            child.expect_exact("you> ")
            child.sendline("/quit")
            assert finish(child) == 0
    finally:
        child_context.__exit__(None, None, None)
