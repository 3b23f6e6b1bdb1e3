"""The WebSocket listener's admission rules and limits (reference §1)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.storage.lock import WorkspaceLock
from appserver.transport.base import ListenerError
from appserver.transport.listen_options import ListenerOptions, is_loopback
from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY
from tests.support.servers import WsStream, child_env

TOKEN = "s3cret-Token_1.x"
ORIGIN = "https://app.example"


@asynccontextmanager
async def listening(workspace: Path, **options: Any) -> AsyncIterator[tuple[AppServer, str]]:
    """An in-process server with a WebSocket listener; yields it and its ``/ws`` URL."""
    options.setdefault("host", "127.0.0.1")
    options.setdefault("port", 0)
    async with (
        AppServer.open(ServerConfig(workspace=workspace)) as app,
        app.listen_websocket(ListenerOptions(**options)),
    ):
        yield app, app.endpoints["appServerWebSocket"]


@asynccontextmanager
async def rpc(url: str, **connect_args: Any) -> AsyncIterator[RpcClient]:
    """An initialized :class:`RpcClient` over a WebSocket."""
    async with connect(url, **connect_args) as ws, anyio.create_task_group() as tg:
        client = RpcClient(WsStream(ws))
        await client.run(tg)
        await client.initialize()
        yield client
        tg.cancel_scope.cancel()


async def refused_status(url: str, **connect_args: Any) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, **connect_args):
            pass
    status: int = info.value.response.status_code
    return status


async def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    def fetch() -> tuple[int, Any]:
        request = urllib.request.Request(url, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, (response.headers["Content-Type"], response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, (error.headers["Content-Type"], error.read())

    return await anyio.to_thread.run_sync(fetch)


def http_base(ws_url: str) -> str:
    return ws_url.replace("ws://", "http://", 1).removesuffix("/ws")


async def test_token_is_checked_before_the_upgrade(workspace: Path) -> None:
    async with listening(workspace, token=TOKEN) as (_, url):
        async with rpc(f"{url}?token={TOKEN}") as client:
            assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []
        # Five wrong tokens, each compared (a sixth attempt would be locked out).
        assert await refused_status(url) == 401
        assert await refused_status(url + "?token=wrong") == 401
        assert await refused_status(url + "?token=") == 401
        assert await refused_status(url + "?token=" + TOKEN[:-1]) == 401
        assert await refused_status(url + "?other=" + TOKEN) == 401


async def test_repeated_wrong_tokens_are_locked_out(workspace: Path) -> None:
    """Guessing from one address, loopback included, stops after five tries."""
    async with listening(workspace, token=TOKEN) as (_, url):
        statuses = [await refused_status(f"{url}?token=guess{n}") for n in range(20)]
        # The lockout (1 s at first) outlasts these attempts on any sane machine.
        assert statuses == [401] * 5 + [429] * 15
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{url}?token={TOKEN}"):
                pass
        assert info.value.response.status_code == 429  # not even compared
        assert info.value.response.headers["Retry-After"] == "1"
        # Health checks are not locked out.
        status, _ = await http_get(http_base(url) + "/healthz")
        assert status == 200


async def test_plain_gets_do_not_count_towards_a_lockout(workspace: Path) -> None:
    """What any web page can make a browser send (an <img src>, a fetch without
    an upgrade) is not a token attempt: it cannot lock the real client out."""
    async with listening(workspace, token=TOKEN) as (_, url):
        plain = http_base(url) + "/ws?token=wrong"
        for _ in range(20):
            status, _ = await http_get(plain)
            assert status == 426
        async with rpc(f"{url}?token={TOKEN}") as client:
            assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_origin_is_refused_unless_allowed(workspace: Path) -> None:
    async with listening(workspace, token=TOKEN, allowed_origins=[ORIGIN]) as (_, url):
        good = f"{url}?token={TOKEN}"
        assert await refused_status(good, origin="https://evil.example") == 403
        assert await refused_status(good, origin="null") == 403
        for origin in (ORIGIN, ORIGIN + "/", ORIGIN.upper()):
            async with rpc(good, origin=origin) as client:
                assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []
        # Non-browser clients send no Origin at all and are fine.
        async with rpc(good) as client:
            assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_any_origin_is_refused_by_default(workspace: Path) -> None:
    async with listening(workspace) as (_, url):
        assert await refused_status(url, origin="http://localhost:3000") == 403
        async with rpc(url) as client:
            assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_health_endpoints_need_no_token(workspace: Path) -> None:
    async with listening(workspace, token=TOKEN) as (_, url):
        base = http_base(url)
        for path in ("/healthz", "/readyz"):
            status, (content_type, body) = await http_get(base + path)
            assert status == 200
            assert content_type == "application/json"
            assert json.loads(body) == {"status": "ok"}
        status, (content_type, body) = await http_get(base + "/nope")
        assert status == 404
        assert content_type.startswith("text/plain")
        assert f"ws://{base.removeprefix('http://')}/ws" in body.decode()  # where to go instead
        status, _ = await http_get(base + "/ws")
        assert status == 426  # not an upgrade: the token is not even looked at
        status, _ = await http_get(base + "/healthz", {"Origin": "https://evil.example"})
        assert status == 403


async def test_oversized_message_closes_with_1009(workspace: Path) -> None:
    async with listening(workspace, max_message_bytes=2048) as (_, url):
        async with connect(url) as ws:
            await ws.send("x" * 4096)
            with pytest.raises(ConnectionClosed) as info, anyio.fail_after(5):
                await ws.recv()
            assert info.value.rcvd is not None
            assert info.value.rcvd.code == 1009
        # The server keeps serving others, including a message just under the cap.
        async with rpc(url) as client:
            padding = "p" * 1500
            result = await client.request("thread/list", {"identity": IDENTITY, "padding": padding})
            assert result["data"] == []


async def test_binary_frames_are_invalid_requests(workspace: Path) -> None:
    async with listening(workspace) as (_, url), rpc(url) as client:
        ws = client.stream.ws  # type: ignore[attr-defined]
        mark = client.mark()
        request = {"jsonrpc": "2.0", "id": 9, "method": "thread/list", "params": {}}
        await ws.send(json.dumps(request).encode())
        reply = await client.wait(lambda m: "error" in m, start=mark)
        assert reply["id"] is None
        assert reply["error"]["code"] == -32600
        assert "binary" in reply["error"]["data"]["detail"]
        await client.settle()
        assert not any(m.get("id") == 9 for m in client.messages)


async def test_fragmented_text_message_is_reassembled(workspace: Path) -> None:
    async with listening(workspace) as (_, url), rpc(url) as client:
        ws = client.stream.ws  # type: ignore[attr-defined]
        frame = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": "frag",
                "method": "thread/list",
                "params": {"identity": IDENTITY},
            }
        )
        await ws.send([frame[:10], frame[10:30], frame[30:]])
        assert (await client.response("frag"))["result"] == {"data": []}


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "example.com", ""):
        assert not is_loopback(host), host


async def test_non_loopback_without_token_is_refused_before_binding(workspace: Path) -> None:
    async with AppServer.open(ServerConfig(workspace=workspace)) as app:
        for host in ("0.0.0.0", "::", "192.0.2.1"):
            with pytest.raises(ListenerError, match="token"):
                async with app.listen_websocket(ListenerOptions(host=host, port=0)):
                    pytest.fail("listener started")
        assert app.endpoints == {}
        # The lock file names no endpoint either.
        lock = json.loads((workspace / ".craft" / "appserver.lock").read_text())
        assert "endpoints" not in lock


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"token": ""}, "token is empty"),
        ({"token": "   "}, "token is empty"),
        ({"host": "0.0.0.0", "token": "short"}, "at least 16"),
        ({"host": "0.0.0.0", "token": "   " * 6}, "token is empty"),
        ({"allowed_origins": ["null"]}, "--allow-origin null"),
    ],
)
async def test_a_token_that_guards_nothing_is_refused(
    workspace: Path, options: dict[str, Any], refusal: str
) -> None:
    """``--token ''`` once meant no authentication at all; a short token on a
    network address falls to guessing; ``null`` is every sandboxed page's origin."""
    async with AppServer.open(ServerConfig(workspace=workspace)) as app:
        with pytest.raises(ListenerError, match=refusal):
            async with app.listen_websocket(ListenerOptions(**{"port": 0, **options})):
                pytest.fail("listener started")


async def cli_refusal(workspace: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``appserver app-server ARGS --workspace WORKSPACE`` run to its end."""
    command = [
        sys.executable,
        "-c",
        "import sys; from appserver.cli import main; sys.exit(main(sys.argv[1:]))",
        "app-server",
        *args,
        "--workspace",
        str(workspace),
    ]
    with anyio.fail_after(20):
        return await anyio.run_process(
            command, env=child_env(), check=False, stdin=subprocess.DEVNULL
        )


async def test_cli_refuses_an_empty_token(workspace: Path) -> None:
    done = await cli_refusal(workspace, "--listen", "ws://127.0.0.1:0", "--token", "")
    assert done.returncode != 0 and b"token is empty" in done.stderr
    assert done.stdout == b""


async def test_cli_refuses_non_loopback_without_token(workspace: Path) -> None:
    done = await cli_refusal(workspace, "--listen", "ws://0.0.0.0:0")
    assert done.returncode != 0
    assert b"non-loopback" in done.stderr and b"token" in done.stderr
    assert done.stdout == b""
    # It refused before touching the workspace at all, and left it unlocked.
    assert not (workspace / ".craft").exists()
    lock = WorkspaceLock(workspace / ".craft" / "appserver.lock")
    lock.acquire({})
    lock.release()
