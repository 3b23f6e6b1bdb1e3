"""``codex-app-server-sdk`` (PyPI, third party) runs a chat turn against
``appserver-codex app-server`` over stdio and over WebSocket (``--listen
ws://HOST:PORT``, path ``/``, the token as ``Authorization: Bearer``). The SDK
needs Python >= 3.12, so it runs in its own cached environment
(tests/support/codex_clients.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.codex_clients import MISSING, app_server_sdk_python
from tests.support.servers import child_env

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "codex_app_server_sdk_chat.py"
TOKEN = "s3cret-token_1"


def _codex_bin() -> str:
    return str(Path(sys.executable).parent / "appserver-codex")


@pytest.fixture(scope="module")
def sdk_python() -> str:
    python = app_server_sdk_python()
    if python is None:
        pytest.skip(MISSING["app-server-sdk"])
    return python


def _env() -> dict[str, str]:
    env = child_env()
    env["APPSERVER_PROVIDER"] = "offline"
    return env


def _chat(python: str, cwd: Path, *args: str) -> dict[str, str]:
    done = subprocess.run(
        [python, str(SCRIPT), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_chat_turn_over_stdio(sdk_python: str, workspace: Path) -> None:
    result = _chat(sdk_python, workspace, "stdio", _codex_bin(), "app-server")
    assert result["text"] == "You said: hello over stdio"
    assert result["turnId"].startswith(result["threadId"] + ":")


@pytest.fixture
def listening(workspace: Path, tmp_path: Path) -> Iterator[str]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    command = [_codex_bin(), "app-server", "--listen", "ws://127.0.0.1:0"]
    command += ["--token-file", str(token_file)]
    process = subprocess.Popen(
        command, cwd=workspace, env=_env(), stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stderr is not None
        seen = ""
        while (match := re.search(r"listening on (ws://\S+)", seen)) is None:
            line = process.stderr.readline().decode()
            assert line, f"appserver-codex exited: {seen}"
            seen += line
        yield match.group(1)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


def test_a_chat_turn_over_websocket_with_a_bearer_token(sdk_python: str, listening: str) -> None:
    assert not listening.endswith("/ws")  # Codex clients connect to the root
    result = _chat(sdk_python, Path.cwd(), "ws", listening, TOKEN)
    assert result["text"] == "You said: hello over ws"


def test_the_websocket_refuses_a_wrong_or_missing_token(listening: str) -> None:
    for headers in ({"Authorization": "Bearer wrong"}, {}):
        with pytest.raises(InvalidStatus) as refused:
            connect(listening, additional_headers=headers, open_timeout=10).close()
        assert refused.value.response.status_code == 401
    with connect(f"{listening}/?token={TOKEN}", open_timeout=10) as ws:  # our own rule
        ws.send(json.dumps({"id": 1, "method": "initialize", "params": {}}))
        answer = json.loads(ws.recv(timeout=10))
    assert answer["id"] == 1 and "userAgent" in answer["result"]
