"""What a newcomer hits when something goes wrong: one clear line, a quick exit,
or a server that keeps going and says what is missing (issue 14).

Every test runs the real ``appserver`` command in a subprocess."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import termios
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from appserver.runtime.titles import title_from
from tests.support.helpers import IDENTITY, start_thread
from tests.support.processes import ws_client, ws_server
from tests.support.servers import ServerUnderTest, child_env
from tests.support.turns import new_thread, run_turn

APPSERVER = [sys.executable, "-m", "appserver"]
CLIENT = {"name": "newcomer-test", "version": "1.0"}


async def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: int = subprocess.DEVNULL
) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(30):
        return await anyio.run_process(
            [*APPSERVER, *args], env=env or child_env(), check=False, stdin=stdin
        )


@contextmanager
def held_port(port: int = 0) -> Iterator[int]:
    """A listening socket on 127.0.0.1:``port``, as another server would hold it.

    If ``port`` is already held by some other process, it is just as taken.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        yield sock.getsockname()[1] if port == 0 else port
    finally:
        sock.close()


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, stderr.decode()
    return lines[0]


# --- 1. a port already in use -------------------------------------------------------------


async def test_a_port_in_use_is_one_line_and_exit_2(workspace: Path) -> None:
    with held_port() as port:
        done = await run_cli(
            "app-server",
            "--workspace",
            str(workspace),
            "--log-level",
            "warning",
            "--listen",
            f"ws://127.0.0.1:{port}",
        )
    assert done.returncode == 2
    assert done.stdout == b""
    line = one_line(done.stderr)
    assert line == (
        f"appserver: ws://127.0.0.1:{port} is already in use (another server?); "
        "pick another port with --listen ws://127.0.0.1:PORT or 0 for any free port"
    )


async def test_a_portless_address_in_use_names_port_9100(workspace: Path) -> None:
    with held_port(9100):
        done = await run_cli(
            "app-server",
            "--workspace",
            str(workspace),
            "--log-level",
            "warning",
            "--listen",
            "ws://127.0.0.1",
        )
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("appserver: ws://127.0.0.1:9100 is already in use")


@pytest.mark.parametrize("face", ["rpc", "acp"])
async def test_a_face_websocket_port_in_use_is_one_line(face: str, workspace: Path) -> None:
    with held_port() as port:
        done = await run_cli(
            face, "--workspace", str(workspace), "--websocket", f"ws://127.0.0.1:{port}"
        )
    assert done.returncode == 2
    assert done.stdout == b""
    line = one_line(done.stderr)
    assert line.startswith(f"appserver: ws://127.0.0.1:{port} is already in use")
    assert "--websocket ws://127.0.0.1:PORT" in line


# --- 2. a bad log level or format in the environment --------------------------------------


@pytest.mark.parametrize("command", ["app-server", "rpc"])
@pytest.mark.parametrize(
    ("variable", "value", "valid"),
    [
        ("APPSERVER_LOG_LEVEL", "verbose", "debug, info, warning, error"),
        ("APPSERVER_LOG_FORMAT", "xml", "text, json"),
    ],
)
async def test_a_bad_log_variable_is_one_line_and_exit_2(
    command: str, variable: str, value: str, valid: str, workspace: Path
) -> None:
    env = {**child_env(), variable: value}
    done = await run_cli(command, "--workspace", str(workspace), env=env)
    assert done.returncode == 2
    assert done.stdout == b""
    line = one_line(done.stderr)
    assert line.startswith(f"appserver: {variable}={value} is not a log ")
    assert line.endswith(valid)
    assert not (workspace / ".craft").exists()  # refused before touching the workspace


# --- 3. a hosted provider without an API key ----------------------------------------------

KEY_VARIABLES = (
    "APPSERVER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "DASHSCOPE_API_KEY",
    "APPSERVER_BASE_URL",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
)
SESSION = b"".join(
    json.dumps(message).encode() + b"\n"
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": CLIENT}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "thread/list", "params": {"identity": IDENTITY}},
    )
)


@pytest.mark.parametrize(
    ("provider", "base_url", "named"),
    [
        ("openai", None, "set APPSERVER_API_KEY or OPENAI_API_KEY"),
        ("anthropic", None, "set APPSERVER_API_KEY or ANTHROPIC_API_KEY"),
        (
            "openai",
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
            "set APPSERVER_API_KEY, DASHSCOPE_API_KEY or OPENAI_API_KEY",
        ),
    ],
)
async def test_a_missing_api_key_is_named_at_start_and_the_server_runs(
    provider: str, base_url: str | None, named: str, workspace: Path
) -> None:
    env = {k: v for k, v in child_env().items() if k not in KEY_VARIABLES}
    env["APPSERVER_PROVIDER"] = provider
    if base_url is not None:
        env["APPSERVER_BASE_URL"] = base_url
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [*APPSERVER, "app-server", "--workspace", str(workspace), "--log-level", "warning"],
            input=SESSION,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [answer.get("id") for answer in answers] == [1, 2]
    assert answers[1]["result"]["data"] == []
    warnings = [line for line in done.stderr.decode().splitlines() if "no API key" in line]
    assert len(warnings) == 1, done.stderr.decode()
    assert (
        f"no API key for provider {provider}: {named} (or apiKey with workspace/config/update)"
        in (warnings[0])
    )
    assert "WARNING" in warnings[0]


@pytest.mark.parametrize(
    "settings",
    [
        {"APPSERVER_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"},
        # A local model server (docs/providers.md's Ollama example) needs no key.
        {"APPSERVER_PROVIDER": "openai", "APPSERVER_BASE_URL": "http://127.0.0.1:11434/v1"},
    ],
)
async def test_an_offline_or_keyed_provider_warns_of_nothing(
    workspace: Path, settings: dict[str, str]
) -> None:
    env = {k: v for k, v in child_env().items() if k not in KEY_VARIABLES}
    env |= settings
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [*APPSERVER, "app-server", "--workspace", str(workspace), "--log-level", "warning"],
            input=SESSION,
            env=env,
            check=False,
        )
    assert done.returncode == 0
    assert b"API key" not in done.stderr


# --- 4. stdin that is no pipe: /dev/null, a terminal ---------------------------------------


async def test_stdin_from_dev_null_ends_the_session_at_once(workspace: Path) -> None:
    with open(os.devnull, "rb") as devnull:
        done = await run_cli(
            "app-server",
            "--workspace",
            str(workspace),
            "--log-level",
            "info",
            stdin=devnull.fileno(),
        )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b""
    assert b"Traceback" not in done.stderr and b"PermissionError" not in done.stderr


async def test_requests_from_a_terminal_are_answered_until_its_end_of_input(
    workspace: Path,
) -> None:
    """A character device other than /dev/null: a pseudo-terminal, as when typing."""
    controller, terminal = os.openpty()
    try:
        attributes = termios.tcgetattr(terminal)
        attributes[3] &= ~termios.ECHO  # what we type is not echoed back at us
        termios.tcsetattr(terminal, termios.TCSANOW, attributes)
        process = await anyio.open_process(
            [*APPSERVER, "app-server", "--workspace", str(workspace), "--log-level", "warning"],
            stdin=terminal,
            env=child_env(),
        )
        os.close(terminal)
        terminal = -1
        async with process:
            # Canonical mode: each line is one read, Ctrl-D at a line's start is end of input.
            os.write(controller, SESSION + b"\x04")
            assert process.stdout is not None
            output = b""
            with anyio.fail_after(30):
                async for chunk in process.stdout:
                    output += chunk
                assert await process.wait() == 0
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    answers = [json.loads(line) for line in output.decode().splitlines()]
    assert [answer.get("id") for answer in answers] == [1, 2]
    assert answers[1]["result"]["data"] == []


# --- 5. the WebSocket root path -----------------------------------------------------------


async def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Status, content type and body of a plain GET (no upgrade)."""

    def fetch() -> tuple[int, str, str]:
        request = urllib.request.Request(url, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers["Content-Type"], error.read().decode()

    return await anyio.to_thread.run_sync(fetch)


async def test_the_root_path_is_a_websocket_endpoint_too(workspace: Path) -> None:
    async with ws_server(workspace, env={**child_env(), "APPSERVER_TOKEN": "t0ken"}) as (_, url):
        assert url.endswith("/ws")
        root = url.removesuffix("/ws")  # ws://127.0.0.1:PORT, as the READMEs write it
        for address in (root, root + "/"):
            async with ws_client(f"{address}?token=t0ken") as client:
                listed = await client.request("thread/list", {"identity": IDENTITY})
                assert listed["data"] == []
            # The token and Origin rules hold at the root as at /ws.
            with pytest.raises(InvalidStatus) as refused:
                async with connect(address):
                    pass
            assert refused.value.response.status_code == 401
            with pytest.raises(InvalidStatus) as refused:
                async with connect(f"{address}?token=t0ken", origin=Origin("https://x.example")):
                    pass
            assert refused.value.response.status_code == 403


async def test_a_plain_get_names_the_websocket_url(workspace: Path) -> None:
    async with ws_server(workspace) as (_, url):
        base = url.replace("ws://", "http://", 1).removesuffix("/ws")
        authority = base.removeprefix("http://")
        for path, status in (("/nope", 404), ("/ws/other", 404)):
            got, content_type, body = await http_get(base + path)
            assert got == status, path
            assert content_type.startswith("text/plain")
            assert f"ws://{authority}/ws" in body
        # The root is the web client (docs/web.md); without it, the same hint with 426.
        got, content_type, body = await http_get(base + "/")
        assert (got, content_type) == (200, "text/html; charset=utf-8")
        # A WebSocket client knocking at a wrong path learns the right one as well.
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url + "/other"):
                pass
        assert refused.value.response.status_code == 404
        assert f"ws://{authority}/ws".encode() in refused.value.response.body


# --- 7. threads named from their first message --------------------------------------------


def test_a_title_is_the_first_line_collapsed_and_cut() -> None:
    assert title_from("\n\n  Fix   the\tlogin bug  \nmore detail") == "Fix the login bug"
    long = "word " * 30
    title = title_from(long)
    assert title is not None and len(title) <= 60 and title.endswith("…")
    assert title == "word " * 11 + "word…"  # cut at a word boundary
    assert title_from("x" * 100) == "x" * 59 + "…"
    assert title_from("  \n\t") is None


async def test_an_untitled_thread_is_named_from_its_first_message(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread_id = await new_thread(client)
        mark = client.mark()
        await run_turn(client, thread_id, "  Explain   the build\nin detail please")
        renamed = await client.notification("thread/renamed", start=mark)
        assert renamed["threadId"] == thread_id
        assert renamed["displayName"] == "Explain the build"
        read = await client.request("thread/read", {"threadId": thread_id})
        assert read["thread"]["displayName"] == "Explain the build"
        listed = await client.request("thread/list", {"identity": IDENTITY})
        assert [t.get("displayName") for t in listed["data"]] == ["Explain the build"]
        # Later turns keep the name.
        mark = client.mark()
        await run_turn(client, thread_id, "something else")
        assert not [m for m in client.messages[mark:] if m.get("method") == "thread/renamed"]


async def test_a_name_chosen_at_start_is_kept(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client, displayName="Mine")
        mark = client.mark()
        await run_turn(client, thread["id"], "hello there")
        assert not [m for m in client.messages[mark:] if m.get("method") == "thread/renamed"]
        read = await client.request("thread/read", {"threadId": thread["id"]})
        assert read["thread"]["displayName"] == "Mine"
