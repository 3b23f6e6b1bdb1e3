"""The chat takes the address the server prints for its web page, and a server
it cannot reach comes with how to start one (issue 27)."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.clients.test_chat import chat, finish, websocket_server
from tests.clients.test_chat_errors import run_chat


def test_the_web_page_address_the_server_prints_is_accepted(workspace: Path) -> None:
    with websocket_server(workspace, "tok-27") as url:
        page = url.replace("ws://", "http://", 1) + "/"  # as in "web client at http://..."
        with chat("--url", page, "--token", "tok-27", cwd=workspace) as child:
            child.expect(r"New thread (thread_\S+)\. Type a message\.")
            child.expect_exact("you> ")
            child.sendline("/quit")
            assert finish(child) == 0


def test_an_unreachable_server_names_make_run(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = run_chat("--url", f"http://127.0.0.1:{port}", cwd=tmp_path)
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert f"could not reach the server at ws://127.0.0.1:{port}" in output
    assert "`make run`" in output
    assert "Traceback" not in output
