"""The WebSocket server answers its first client's ``initialize`` before it
imports anything heavy (appserver/transport/early_ws.py), with the built
server's bytes; every other first connection gets the listener's own
handshake and admission checks, as before.

Each server is a real process (tests/support/early.py ``websocket_door``) and
the client the ``websockets`` library's, as desktop apps and scripts connect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from tests.support.early import (
    INITIALIZED,
    built_answer,
    heavy_modules,
    initialize,
    websocket_door,
)

TIMEOUT = 30


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> str:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
    return json.dumps(message)


LIST_THREADS = request(2, "thread/list", {"identity": {"channelName": "c", "userId": "u"}})


async def test_the_first_initialize_is_answered_early_as_a_built_server(tmp_path: Path) -> None:
    expected = await built_answer(tmp_path, initialize())
    with websocket_door(tmp_path) as door, connect(door.url, open_timeout=TIMEOUT) as client:
        client.send(initialize())
        assert client.recv(timeout=TIMEOUT) == expected
        client.send(INITIALIZED)
        client.send(LIST_THREADS)
        answer = json.loads(client.recv(timeout=TIMEOUT))  # once the server is built
        assert answer["id"] == 2 and "result" in answer  # the first was answered once
        with connect(door.url, open_timeout=TIMEOUT) as second:  # the listener is the server's
            second.send(initialize(5))
            assert json.loads(second.recv(timeout=TIMEOUT))["id"] == 5
    assert door.modules is not None, "no early answer"
    assert heavy_modules(door.modules) == []
    stderr = "".join(door.stderr)
    assert "ERROR" not in stderr
    assert stderr.count("appserver: listening on ") == 1
    assert "appserver: web client at" in stderr


def test_a_page_gets_the_listeners_own_handshake(tmp_path: Path) -> None:
    """A browser's upgrade (it carries ``Origin``) is left to Admission: the
    listener's own page is let in, another site's is refused, before any frame."""
    with websocket_door(tmp_path) as door:
        page = door.url.removesuffix("/ws").replace("ws://", "http://", 1)
        with pytest.raises(InvalidStatus) as refused:
            connect(door.url, origin=Origin("http://evil.example"), open_timeout=TIMEOUT)
        assert refused.value.response.status_code == 403
        with connect(door.url, origin=Origin(page), open_timeout=TIMEOUT) as client:
            client.send(initialize())
            assert "serverInfo" in json.loads(client.recv(timeout=TIMEOUT))["result"]
    assert door.modules is None


def test_a_token_is_checked_by_the_listener(tmp_path: Path) -> None:
    """With a token, no upgrade is done early: the listener checks every offer."""
    with websocket_door(tmp_path, "--token", "s3cret") as door:
        with pytest.raises(InvalidStatus) as refused:
            connect(door.url, open_timeout=TIMEOUT)
        assert refused.value.response.status_code == 401
        with connect(f"{door.url}?token=s3cret", open_timeout=TIMEOUT) as client:
            client.send(initialize())
            assert "serverInfo" in json.loads(client.recv(timeout=TIMEOUT))["result"]
    assert door.modules is None


def test_a_first_frame_that_is_no_initialize_is_the_servers(tmp_path: Path) -> None:
    """A first request other than a plain ``initialize`` is left unread: the built
    server answers it as it always did (here: not initialized yet)."""
    with websocket_door(tmp_path) as door, connect(door.url, open_timeout=TIMEOUT) as client:
        client.send(LIST_THREADS)
        refused = json.loads(client.recv(timeout=TIMEOUT))
        assert refused["id"] == 2 and "error" in refused
        client.send(initialize())
        assert "serverInfo" in json.loads(client.recv(timeout=TIMEOUT))["result"]
    assert door.modules is None
