"""The WebSocket door's early answer at the socket level (appserver/transport/early_ws.py):
what it reads, what it leaves unread for the library, and what it writes."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator

import pytest

from appserver.transport.early_ws import Accepted, bind, first_connection
from appserver.transport.listen_options import ListenerOptions, endpoint

KEY = base64.b64encode(b"0123456789abcdef").decode()
UPGRADE = (
    "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
).encode()
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'
ANSWER = '{"jsonrpc":"2.0","id":1,"result":{}}'


def client_frame(payload: bytes, first_byte: int = 0x81) -> bytes:
    """A masked client frame (payloads under 126 bytes)."""
    mask = b"\x0a\x0b\x0c\x0d"
    masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bytes((first_byte, 0x80 | len(payload))) + mask + masked


def answer(text: bytes) -> str | None:
    return ANSWER if json.loads(text).get("method") == "initialize" else None


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with bind(ListenerOptions(host="127.0.0.1", port=0)) as sock:
        yield sock


def accept(
    listener: socket.socket, sent: bytes, wait: float = 2.0
) -> tuple[Accepted, socket.socket]:
    client = socket.create_connection(listener.getsockname())
    client.sendall(sent)
    accepted = first_connection(listener, answer, token_required=False, wait=wait)
    assert accepted is not None
    client.settimeout(5)
    return accepted, client


def unread(accepted: Accepted, size: int) -> bytes:
    accepted.sock.settimeout(5)
    data = b""
    while len(data) < size:
        data += accepted.sock.recv(size - len(data))
    return data


def test_a_plain_initialize_is_answered_and_what_follows_left_unread(
    listener: socket.socket,
) -> None:
    following = client_frame(b'{"jsonrpc":"2.0","method":"initialized"}')
    accepted, client = accept(listener, UPGRADE + client_frame(INITIALIZE) + following)
    with client, accepted.sock:
        assert accepted.upgraded and accepted.early is not None
        assert accepted.early == (INITIALIZE, ANSWER)
        response = client.recv(4096)
        head, _, frame = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        assert b"Sec-WebSocket-Accept: " in head and b"Server: appserver" in head
        if not frame:
            frame = client.recv(4096)
        assert frame == bytes((0x81, len(ANSWER))) + ANSWER.encode()
        assert unread(accepted, len(following)) == following


def test_a_first_frame_that_is_no_plain_text_frame_is_left_unread(listener: socket.socket) -> None:
    ping = client_frame(b"hi", first_byte=0x89)
    accepted, client = accept(listener, UPGRADE + ping + client_frame(INITIALIZE))
    with client, accepted.sock:
        assert accepted.upgraded and accepted.early is None
        assert unread(accepted, len(ping)) == ping  # the library answers the ping


def test_a_request_that_is_no_plain_upgrade_is_left_whole(listener: socket.socket) -> None:
    request = UPGRADE.replace(b"\r\n\r\n", b"\r\nOrigin: http://example.com\r\n\r\n")
    accepted, client = accept(listener, request)
    with client, accepted.sock:
        assert not accepted.upgraded and accepted.early is None
        assert unread(accepted, len(request)) == request  # Admission decides


@pytest.mark.parametrize(
    "request_bytes",
    [
        UPGRADE.replace(b"GET /ws ", b"GET http://[::1/ws "),  # urlsplit refuses it
        UPGRADE.replace(b"\r\nUpgrade", b"\nUpgrade"),  # a bare line end
        UPGRADE.replace(b"\r\n\r\n", b"\r\nContent-Length: 0\r\n\r\n"),  # a body
        UPGRADE.replace(b"Host: 127.0.0.1", b"Host: 127.0.0.1\x00"),  # a control character
        UPGRADE.replace(b"\r\n\r\n", b"\r\nHost: evil.example\r\n\r\n"),  # two Hosts: 400
    ],
    ids=["bad-target", "bare-lf", "body", "nul", "two-hosts"],
)
def test_a_request_the_library_refuses_is_left_to_it(
    listener: socket.socket, request_bytes: bytes
) -> None:
    """Never upgraded early (nor a crash): the library answers it as it would have."""
    accepted, client = accept(listener, request_bytes)
    with client, accepted.sock:
        assert not accepted.upgraded and accepted.early is None
        assert unread(accepted, len(request_bytes)) == request_bytes


def test_a_silent_client_is_left_to_the_library(listener: socket.socket) -> None:
    """Nothing within the wait: the connection goes on untouched (the library's
    handshake then waits for it, with its own timeout)."""
    accepted, client = accept(listener, b"", wait=0.05)
    with client, accepted.sock:
        assert not accepted.upgraded and accepted.early is None
        client.sendall(UPGRADE)
        assert unread(accepted, len(UPGRADE)) == UPGRADE


def test_no_connection_within_the_wait(listener: socket.socket) -> None:
    assert first_connection(listener, answer, token_required=False, wait=0.01) is None


def test_the_address_is_written_as_a_url() -> None:
    assert endpoint(ListenerOptions(host="127.0.0.1"), 9100) == "ws://127.0.0.1:9100/ws"
    assert endpoint(ListenerOptions(host="::1"), 9100) == "ws://[::1]:9100/ws"
