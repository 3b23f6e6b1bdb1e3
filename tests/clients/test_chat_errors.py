"""`appserver-client chat` when it cannot start: one clear line, never a
traceback, and fast (a spawned server that exits, bad URLs, a refused token)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.clients.test_chat import BIN, CHAT, chat_env, websocket_server


def run_chat(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHAT, "chat", *args],
        cwd=cwd,
        env=chat_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_spawned_server_that_exits_is_reported_with_its_exit_code_and_stderr(
    workspace: Path,
) -> None:
    started = time.monotonic()
    command = f"{BIN / 'appserver'} app-server --no-such-flag"
    done = run_chat("--server-command", command, cwd=workspace)
    assert time.monotonic() - started < 10  # not the 60 s request timeout
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert "exited with code 2" in output
    assert "unrecognized arguments: --no-such-flag" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1:9100", "ws://127.0.0.1:notaport", "127.0.0.1:9100"]
)
def test_a_bad_url_is_one_line_not_a_traceback(tmp_path: Path, url: str) -> None:
    done = run_chat("--url", url, cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("appserver-client: ")
    assert "ws://HOST:PORT" in lines[0]


def test_a_refused_token_names_the_flag_and_the_variable(workspace: Path, tmp_path: Path) -> None:
    with websocket_server(workspace, "tok-123") as url:
        for args in (["--url", url], ["--url", url, "--token", "wrong"]):
            done = run_chat(*args, cwd=tmp_path)
            assert done.returncode == 1
            output = done.stdout + done.stderr
            assert "refused the token" in output
            assert "--token" in output and "APPSERVER_TOKEN" in output
            assert "could not reach" not in output and "Traceback" not in output
